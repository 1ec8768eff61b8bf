"""`python -m tensorjit`: version, help, argument choices, and no speedup claimed for nothing captured."""

import pytest

import tensorjit
from tensorjit import __main__ as cli


def test_version(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == f"tensorjit {tensorjit.__version__}"


def test_unknown_backend_names_the_valid_ones(capsys):
    with pytest.raises(SystemExit):
        cli.main(["demo", "--backend", "nope"])
    err = capsys.readouterr().err
    assert "--backend" in err and "inductor" in err


def test_demo_reports_median_and_spread(capsys):
    assert cli.main(["demo", "--model", "mlp", "--backend", "eager", "--iters", "2", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "graphs=1" in out and "median of 2" in out and "speedup" in out


def test_demo_claims_no_speedup_when_nothing_was_captured(capsys, monkeypatch):
    monkeypatch.setattr(tensorjit, "compile", lambda model, **options: model)  # captures nothing
    assert cli.main(["demo", "--model", "mlp", "--backend", "eager", "--iters", "1", "--repeats", "1"]) == 1
    out = capsys.readouterr().out
    assert "nothing was captured" in out and "speedup  :" not in out

