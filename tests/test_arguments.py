"""compile()'s arguments: each wrong value is refused at compile() time, naming the argument and the valid values.

Where torch.compile checks the same thing, the test notes its message (torch 2.13) for comparison.
"""

import pytest
import torch

import tensorjit
from tensorjit import config as config_module
from tensorjit.config import Config


def f(x):
    return x + 1


@pytest.mark.parametrize("options, pattern", [
    # torch: "Unexpected type of attr max_autotune, got str should be bool"
    ({"profile_kernels": "no"}, r"options\['profile_kernels'\] must be bool, got str 'no'"),
    ({"cache_size_limit": "8"}, r"options\['cache_size_limit'\] must be int, got str '8'"),
    ({"cache_size_limit": True}, r"options\['cache_size_limit'\] must be int, got bool True"),
    ({"max_autotune": 1}, r"options\['max_autotune'\] must be bool, got int 1"),
    ({"cache_dir": 3}, r"options\['cache_dir'\] must be str \| None, got int 3"),
    ({"cpp_compiler": ["g++"]}, r"options\['cpp_compiler'\] must be str \| None, got list"),
])
def test_option_of_wrong_type_names_it_and_lists_types(options, pattern):
    with pytest.raises(TypeError, match=pattern) as raised:
        tensorjit.compile(f, options=options)
    assert "valid options are: cache_dir (str | None), cache_size_limit (int)," in str(raised.value)


def test_option_of_right_type_is_accepted():
    compiled = tensorjit.compile(f, backend="eager", options={"cache_dir": None, "cache_size_limit": 4,
                                                              "profile_kernels": True})
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))


def test_option_with_unknown_choice_lists_the_choices():
    with pytest.raises(ValueError, match=r"options\['partitioner'\] must be one of 'min_cut', 'save_all', got 'x'"):
        tensorjit.compile(f, options={"partitioner": "x"})


@pytest.mark.parametrize("options", [3, [("cache_size_limit", 2)], "cache_size_limit=2", 0, ""])
def test_options_not_a_dict_says_options(options):
    # torch: AttributeError: 'int' object has no attribute 'items'
    with pytest.raises(TypeError, match="options must be a dict of option name -> value, got .*valid options are"):
        tensorjit.compile(f, options=options)


def test_unknown_option_lists_names_and_types():
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'bogus'; valid options are: .*profile_kernels \(bool\)"):
        tensorjit.compile(f, options={"bogus": 1})
    with pytest.raises(ValueError, match=r"unknown option\(s\) 3"):
        tensorjit.compile(f, options={3: 1})


def test_config_edited_by_assignment_is_checked(monkeypatch):
    edited = Config()
    edited.profile_kernels = "no"
    monkeypatch.setattr("tensorjit.api.default_config", edited)
    with pytest.raises(TypeError, match=r"tensorjit.config.config\['profile_kernels'\] must be bool"):
        tensorjit.compile(f)


def test_config_replace_checks_types():
    with pytest.raises(TypeError, match=r"options\['compile_threads'\] must be int"):
        Config().replace(compile_threads=1.5)


def test_environment_variable_of_wrong_type_is_named():
    with pytest.raises(ValueError, match="TENSORJIT_CACHE_SIZE_LIMIT must be an integer, got 'many'"):
        config_module.from_environment({"TENSORJIT_CACHE_SIZE_LIMIT": "many"})


@pytest.mark.parametrize("name, value", [("fullgraph", "yes"), ("fullgraph", 1), ("fullgraph", None),
                                         ("disable", "x"), ("disable", 0)])
def test_flags_must_be_bool(name, value):
    # torch accepts fullgraph="yes" and disable="x" silently
    with pytest.raises(TypeError, match=f"{name} must be True or False, got {type(value).__name__} {value!r}"):
        tensorjit.compile(f, **{name: value})


@pytest.mark.parametrize("value", ["x", 1, 0, "True"])
def test_dynamic_must_be_none_or_bool(value):
    # torch: AssertionError: Expected enable to be a bool, got <class 'str'>
    with pytest.raises(TypeError, match=f"dynamic must be None, True or False, got {type(value).__name__} {value!r}"):
        tensorjit.compile(f, dynamic=value)


@pytest.mark.parametrize("mode", ["fast", 3, "DEFAULT"])
def test_unknown_mode_lists_modes(mode):
    # torch: "Unrecognized mode=fast, should be one of: default, lite, reduce-overhead, ..."
    with pytest.raises(ValueError, match=f"unknown mode {type(mode).__name__} {mode!r}; valid modes are: "
                                         "default, reduce-overhead, max-autotune"):
        tensorjit.compile(f, mode=mode)


def test_mode_and_options_together_are_refused():
    # torch: "Either mode or options can be specified, but both can't be specified at the same time."
    with pytest.raises(ValueError, match="either mode or options, not both"):
        tensorjit.compile(f, mode="default", options={"max_autotune": True})


@pytest.mark.parametrize("model", [3, "f", [f]])
def test_model_not_callable_is_named(model):
    # torch: AssertionError: A callable function is expected, but <class 'int'> is provided.
    with pytest.raises(TypeError, match=f"model must be a function, method, nn.Module or callable object, "
                                        f"got {type(model).__name__}"):
        tensorjit.compile(model)


@pytest.mark.parametrize("backend", [3, ["eager"]])
def test_backend_not_a_name_or_callable_lists_backends(backend):
    # torch accepts backend=3 and fails at the first call ("'int' object is not callable")
    with pytest.raises(TypeError, match=r"backend must be a name or a callable, got .*; valid backends are: .*eager"):
        tensorjit.compile(f, backend=backend)


def test_backend_none_is_the_default_backend():
    # torch.compile(backend=None) means torch.compiler.get_default_backend(), "inductor" unless set
    graphs = []
    tensorjit.compiler.set_default_backend(lambda gm, example_inputs: graphs.append(gm) or gm.forward)
    try:
        tensorjit.compile(lambda x: x + 1, backend=None)(torch.ones(2))
    finally:
        tensorjit.compiler.set_default_backend(None)
    assert len(graphs) == 1


def test_decorator_form_checks_arguments_at_once():
    with pytest.raises(TypeError, match="fullgraph must be True or False"):
        tensorjit.compile(fullgraph="no")


@pytest.mark.parametrize("call, error, pattern", [
    (lambda: tensorjit.logs.set_logs("graph_break"), ValueError,
     r"unknown log kind\(s\) \['graph_break'\]; valid kinds are: graph_breaks, guards"),
    (lambda: tensorjit.logs.set_logs(bogus=True), ValueError, r"unknown log kind\(s\) \['bogus'\]; valid kinds"),
    # torch: "Expected bool to enable artifact graph_breaks, received 5"
    (lambda: tensorjit.logs.set_logs(graph_breaks=5), TypeError, r"set_logs\(graph_breaks=...\) must be True or False"),
    (lambda: tensorjit.logs.set_logs(5), TypeError, "comma-separated string or a set of log kinds, got int 5"),
    (lambda: tensorjit.logs.set_logs([1]), TypeError, "comma-separated string or a set of log kinds, got list"),
])
def test_set_logs_names_the_wrong_value(call, error, pattern):
    try:
        with pytest.raises(error, match=pattern):
            call()
    finally:
        tensorjit.logs.set_logs("")


@pytest.mark.parametrize("name, value", [("cache_size_limit", -1), ("compile_threads", -2), ("inline_depth_limit", -1)])
def test_counts_must_not_be_negative(name, value):
    with pytest.raises(ValueError, match=rf"options\['{name}'\] must be 0 or more, got {value}"):
        tensorjit.compile(f, options={name: value})


@pytest.mark.parametrize("call, pattern", [
    (lambda: tensorjit.register_backend(3), "the backend must be a callable .gm, example_inputs. -> callable, got int"),
    (lambda: tensorjit.register_backend(f, name=3), "name must be a non-empty str, got 3"),
    (lambda: tensorjit.register_backend(name="")(f), "name must be a non-empty str"),
])
def test_register_backend_names_the_wrong_argument(call, pattern):
    with pytest.raises(TypeError, match=pattern):
        call()


def test_disable_names_the_wrong_argument():
    with pytest.raises(TypeError, match="tensorjit.disable: fn must be a function, .*got int 3"):
        tensorjit.disable(3)
    with pytest.raises(TypeError, match="tensorjit.disable: recursive must be True or False, got str 'no'"):
        tensorjit.disable(f, recursive="no")


def test_progress_option_and_variable_list_their_values():
    with pytest.raises(ValueError, match=r"options\['progress'\] must be one of 'auto', 'always', 'never', got 'yes'"):
        tensorjit.compile(f, options={"progress": "yes"})
    with pytest.warns(RuntimeWarning, match="ignoring TENSORJIT_PROGRESS='yes'; valid values are: auto, always, never"):
        assert config_module.from_environment({"TENSORJIT_PROGRESS": "yes"}).progress == "auto"
