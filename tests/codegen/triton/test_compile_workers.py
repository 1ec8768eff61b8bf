"""Compile worker processes must not run the user's script again."""

import os
import subprocess
import sys
import textwrap


def test_workers_start_without_importing_the_users_script(tmp_path):
    marker = tmp_path / "runs.txt"
    script = tmp_path / "user_script.py"
    # A script without an `if __name__ == "__main__":` guard, as users write them.
    script.write_text(textwrap.dedent(f"""
        import concurrent.futures, multiprocessing, os
        from tensorjit.codegen.triton.parallel import _main_module_hidden
        with open({str(marker)!r}, "a") as f:
            f.write("ran\\n")
        with _main_module_hidden():
            pool = concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
            futures = [pool.submit(os.getpid) for _ in range(2)]
        assert all(f.result() != os.getpid() for f in futures)
        pool.shutdown()
        assert __file__.endswith("user_script.py")  # restored in the parent
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, str(script)], check=True, env=env, timeout=120)
    assert marker.read_text() == "ran\n", "the script ran again in a worker"


def _chain(operations):
    import torch

    def f(x):
        for _ in range(operations):
            x = x.sin()
        return x

    return torch.fx.symbolic_trace(f)


def test_a_large_graph_starts_the_workers_before_it_is_traced(monkeypatch):
    from tensorjit.codegen import triton as triton_codegen
    from tensorjit.codegen.triton import parallel

    started = []
    monkeypatch.setattr(parallel, "start_workers", lambda workers=0: started.append(workers))
    triton_codegen.expect_graph(_chain(triton_codegen.EARLY_WORKERS_MIN_OPS - 1))
    assert started == [], "a small graph may compile in the main process: no workers for it"
    triton_codegen.expect_graph(_chain(triton_codegen.EARLY_WORKERS_MIN_OPS))
    assert started == [0]


def test_default_workers_are_half_the_usable_cores_up_to_16():
    from tensorjit.codegen.triton import parallel

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert parallel.default_workers() == max(1, min(usable // 2, 16))


def test_started_workers_take_even_a_few_kernels(monkeypatch):
    import concurrent.futures

    import torch

    from tensorjit.codegen.triton import parallel

    class Pool:
        def __init__(self):
            self.submitted = []

        def submit(self, function, job):
            self.submitted.append(job)
            future = concurrent.futures.Future()
            future.set_result(None)
            return future

    jobs = [parallel.CompileJob(f"k{i}.py", f"k{i}", (torch.float32,), (), 4, 1) for i in range(3)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(parallel, "_pool", None)
    assert parallel.compile_in_parallel(jobs, workers=4) == 0, "too few to start a pool for"
    pool = Pool()
    monkeypatch.setattr(parallel, "_pool", pool)
    monkeypatch.setattr(parallel, "_pool_size", 4)
    monkeypatch.setattr(parallel, "_warm_ups", [_done() for _ in range(4)])
    assert parallel.compile_in_parallel(jobs + jobs[:1], workers=4) == 3
    assert pool.submitted == jobs


def _done():
    import concurrent.futures

    future = concurrent.futures.Future()
    future.set_result(None)
    return future


class _SlowPool:
    """Jobs submitted stay running until `finish_all`."""

    def __init__(self):
        import concurrent.futures

        self.futures = {}
        self.concurrent = concurrent.futures
        self.finishing = False

    def submit(self, function, job):
        future = self.futures[job] = self.concurrent.Future()
        future.set_running_or_notify_cancel()
        if self.finishing:
            future.set_result(None)
        return future

    def finish_all(self):
        """Finish the running jobs, and every later one as it is submitted."""
        self.finishing = True
        for future in self.futures.values():
            if not future.done():
                future.set_result(None)


def _jobs(count):
    import torch

    from tensorjit.codegen.triton import parallel

    return [parallel.CompileJob(f"k{i}.py", f"k{i}", (torch.float32,), (), 4, 1) for i in range(count)]


def test_the_main_process_compiles_while_no_worker_is_ready(monkeypatch):
    # Workers still importing torch take nothing (a submitted job cannot be taken back): the main
    # process compiles every kernel itself rather than wait for them.
    from tensorjit.codegen.triton import parallel

    importing = [parallel.concurrent.futures.Future() for _ in range(4)]
    compiled_here = []
    monkeypatch.setattr(parallel, "_warm_ups", importing)
    monkeypatch.setattr(parallel, "compile_job", compiled_here.append)
    pool = _SlowPool()
    jobs = _jobs(5)
    parallel._share(pool, jobs)
    assert pool.futures == {} and compiled_here == jobs[::-1]


def test_ready_workers_get_two_kernels_each_and_the_main_process_takes_from_the_far_end(monkeypatch):
    from tensorjit.codegen.triton import parallel

    warm_ups = [_done(), parallel.concurrent.futures.Future()]  # one worker ready, one importing
    compiled_here = []
    pool = _SlowPool()

    def compile_here(job):
        compiled_here.append(job)
        if len(compiled_here) == 3:
            pool.finish_all()  # the ready worker finished its two meanwhile

    monkeypatch.setattr(parallel, "_warm_ups", warm_ups)
    monkeypatch.setattr(parallel, "compile_job", compile_here)
    jobs = _jobs(7)
    parallel._share(pool, jobs)
    assert list(pool.futures) == jobs[:2] + jobs[2:4], "two at a time to the one ready worker"
    assert compiled_here == [jobs[6], jobs[5], jobs[4]]
    assert all(future.done() for future in pool.futures.values())


def _stack(layers, device):
    import torch

    return torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(layers)]).to(device)


def _compile_and_see_workers(monkeypatch, module):
    import tensorjit
    from tensorjit.codegen.triton import parallel

    started = []
    monkeypatch.setattr(parallel, "start_workers", lambda workers=0: started.append(workers))
    tensorjit.compile(module)  # no call: the workers start at compile, before capture
    return started


def test_compiling_a_large_module_on_the_cpu_starts_no_workers(monkeypatch):
    assert _compile_and_see_workers(monkeypatch, _stack(40, "cpu")) == []


def test_compiling_a_large_cuda_module_starts_the_workers_at_once(monkeypatch):
    import pytest
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    assert _compile_and_see_workers(monkeypatch, _stack(31, "cuda")) == []  # 62 tensors: a small model
    assert _compile_and_see_workers(monkeypatch, _stack(32, "cuda")) == [0]
