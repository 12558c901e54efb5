"""A callable run in a worker process, so that a crash, a hang, a runaway allocation or a process
left behind fails one case and the run goes on: the bounds the plugin worker holds a plugin to
(impls/plugin/README.md, "The bounds a plugin is held to"), for Python.

Each call forks a worker (it inherits the callable and the case's inputs without a copy being
sent), leader of its own process group, subreaper of everything the callable starts, and killed
with the harness (PR_SET_PDEATHSIG). The worker calls, then kills and reaps any process still
running below it (a call that left one fails, naming it: a callable may start processes but must
wait for them), sends back the output arrays (pickled, over a pipe) and exits without running
Python's shutdown. The harness waits up to ``timeout`` seconds; a signal, a non-zero exit or a
timeout becomes that case's failure, naming what happened, with the first and last 4 KiB of what
the worker wrote; the worker's process group is killed after every call.

Memory: the worker's address space is limited (RLIMIT_AS) to what it already maps (the
interpreter and the libraries loaded before the fork) plus ``memory_limit`` bytes, by default
half of the machine's physical memory, so a runaway allocation fails inside the worker instead
of bringing in the OOM killer. ``memory_limit=0`` sets no limit (a CUDA callable: the driver
reserves address space beyond any useful limit).

The sandbox (impls/sandbox/README.md; ``isolate=True``): the call runs in PID, mount and network
namespaces of its own (below), confined by Landlock (writes only to a scratch directory,
its working directory and TMPDIR, removed after the call) and seccomp (no signal to another
process, no tracing, no new process or program, no socket but AF_UNIX, its result pipe kept open);
every call the sandbox refused fails the case, named ("the sandbox refused the callable's
socket(AF_INET): no network in the sandbox"). A bound the machine cannot set up is named in a
warning, once. ``isolate="no-sandbox"`` keeps the worker and its other bounds without the sandbox,
for a callable that needs processes (Triton's compiler runs ptxas) or the network. The worker, a
fork, spawns the process that calls into the namespaces (impls/sandbox's spawn_sandboxed: a /proc
of its own, under a process 1 that reaps; whatever it starts dies with it), waits for it and ends
the way it ended.

A fork copies only the calling thread: a callable that needs threads the parent's libraries
started before the fork (JAX's, for one) may hang in the worker and is then killed at its
timeout; such callables are best verified without isolation.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import sys
import time
import traceback

OUTPUT_KEPT = 4096  # bytes kept from the start and from the end of what the worker writes
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def _prctl(option, value):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, ctypes.c_ulong(value), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the bound is not set
        pass


def _address_space_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def half_the_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def _descendants(pid):
    """Every process below pid (through /proc/PID/task/*/children)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _kill_left_behind():
    """Stops, kills and reaps what the call left running below this worker; returns their pids."""
    left = _descendants("self")
    for pid in left:
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for _ in left:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    return left


_warned_bounds = set()


def _warn_unavailable(bounds):
    """Once per bound and process: what the sandbox could not set up here, and why."""
    import warnings
    for name, applied, detail in bounds:
        if not applied and name not in _warned_bounds:
            _warned_bounds.add(name)
            warnings.warn(f"attnbench isolate=True: sandbox bound {name} unavailable here: {detail}", RuntimeWarning, stacklevel=4)


def isolated(invoke, timeout: float = 60.0, memory_limit=None, sandbox: bool = True):
    limit = half_the_memory() if memory_limit is None else int(memory_limit)
    from . import _native

    # fed: a backward case's (the convention's invoker): passed on only where given.
    def call(problem, inputs, want_lse, *fed):
        scratch = _native._sandbox_scratch() if sandbox else None
        try:
            return run(problem, inputs, want_lse, fed, scratch)
        finally:
            if scratch:
                _native._sandbox_remove(scratch)

    def run(problem, inputs, want_lse, fed, scratch):
        data_r, data_w = os.pipe()
        out_r, out_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker
            status = 0
            try:
                os.setpgid(0, 0)
                _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                _prctl(_PR_SET_CHILD_SUBREAPER, 1)
                if os.getppid() != parent:  # the harness died before PDEATHSIG was set
                    os._exit(70)
                os.close(data_r)
                os.close(out_r)
                os.dup2(out_w, 1)
                os.dup2(out_w, 2)
                import faulthandler  # a crash is reported by the harness, by its signal: no dump on the runner's terminal
                faulthandler.disable()
                # Python's own streams too (a test runner may have replaced them with its captures).
                sys.stdout = open(1, "w", closefd=False, buffering=1)
                sys.stderr = open(2, "w", closefd=False, buffering=1)
                if limit > 0:
                    import resource
                    cap = _address_space_bytes() + limit
                    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
                bounds = []
                if scratch:
                    # The call runs in the sandbox's namespaces, two processes below this one (their
                    # process 1 reaps); this one ends the way the call's process ended.
                    inner, status_fd, bounds = _native._sandbox_spawn()
                    if inner != 0:
                        _end_as(_native._sandbox_wait(inner, status_fd))
                    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
                    import tempfile
                    sys.dont_write_bytecode = True  # a lazy import's .pyc would be a write outside the scratch directory
                    os.chdir(scratch)
                    os.environ["TMPDIR"] = scratch
                    tempfile.tempdir = scratch
                    bounds = list(bounds) + list(_native._sandbox_confine(scratch, data_w))
                try:
                    payload = ("ok", invoke(problem, inputs, want_lse, *fed))
                except MemoryError:
                    payload = ("raised", f"MemoryError: the isolated call ran out of its memory limit ({limit / 2**30:.3g} GiB beyond the "
                                         f"interpreter's own; memory_limit=)", "")
                except BaseException as e:  # noqa: BLE001 - everything the callable raises is its failure
                    payload = ("raised", f"{type(e).__name__}: {e}", traceback.format_exc(limit=-3))
                refused = _native._sandbox_refusals() if scratch else []
                if refused:
                    said = "; ".join(refused)
                    payload = ("raised", said, "") if payload[0] == "ok" else ("raised", f"{payload[1]}; {said}", payload[2])
                left = _kill_left_behind()
                if left and payload[0] == "ok":
                    payload = ("raised", f"the call left {len(left)} process(es) running (pids {', '.join(map(str, left[:8]))}), "
                                         f"killed: a callable must wait for what it starts", "")
                payload = payload + (bounds,)
                sys.stdout.flush()
                sys.stderr.flush()
                with os.fdopen(data_w, "wb") as f:
                    pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException:  # noqa: BLE001
                status = 70
            finally:
                os._exit(status)
        os.close(data_w)
        os.close(out_w)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the worker set it itself, or is gone
        chunks, head, tail, written = [], bytearray(), bytearray(), 0
        deadline = time.monotonic() + timeout
        open_fds = {data_r, out_r}
        timed_out = False
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(list(open_fds), [], [], left)
            for fd in ready:
                block = os.read(fd, 1 << 20)
                if not block:
                    open_fds.discard(fd)
                elif fd == data_r:
                    chunks.append(block)
                else:
                    written += len(block)
                    if len(head) < OUTPUT_KEPT:
                        head += block[:OUTPUT_KEPT - len(head)]
                    tail += block
                    del tail[:-OUTPUT_KEPT]
        if timed_out:
            _kill_group(pid)
        _, status = os.waitpid(pid, 0)
        _kill_group(pid)  # anything it started in its group dies with the call
        for fd in (data_r, out_r):
            try:
                os.close(fd)
            except OSError:
                pass
        said = _output_text(head, tail, written)
        if timed_out:
            raise RuntimeError(f"the isolated call did not return within {timeout:g} s and was killed{said}")
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            raise RuntimeError(f"the isolated call crashed: {signal.Signals(sig).name} (signal {sig}){said}")
        if os.WEXITSTATUS(status) != 0 or not chunks:
            raise RuntimeError(f"the isolated call exited with status {os.WEXITSTATUS(status)} before returning{said}")
        payload = pickle.loads(b"".join(chunks))
        call.sandbox_bounds = payload[-1]
        _warn_unavailable(payload[-1])
        if payload[0] == "raised":
            raise RuntimeError(f"{payload[1]}{said}\n{payload[2]}")
        return payload[1]

    call.sandbox_bounds = []
    return call


def _end_as(status):
    """Ends this process the way a wait status says: the same exit status, or the same signal."""
    try:
        if os.WIFSIGNALED(status):
            import resource
            sig = os.WTERMSIG(status)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the process that crashed dumped its own
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 70)
    finally:
        os._exit(70)


def _output_text(head, tail, written):
    if not written:
        return ""
    if written <= 2 * OUTPUT_KEPT:
        text = (head + tail[len(head) - written:] if written > len(head) else head).decode(errors="replace").strip()
        return f" (its output: {text[-800:]!r})"
    return f" (its output, {written} bytes: {head.decode(errors='replace')[:400]!r} ... {tail.decode(errors='replace')[-400:]!r})"


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
