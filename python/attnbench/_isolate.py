"""A callable run in a worker process, so that a crash, a hang or a runaway allocation fails one
case and the run goes on: the bounds the plugin worker holds a plugin to (impls/plugin/README.md).

Each call forks a child (it inherits the callable and the case's inputs without a copy being
sent), in a process group of its own. The child calls, sends back the output arrays (pickled,
over a pipe) and exits without running Python's shutdown. The parent waits up to ``timeout``
seconds; a signal, a non-zero exit or a timeout becomes that case's failure, naming what
happened and the last lines the child wrote; the child's whole process group is then killed, so
nothing it started outlives the call.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import time
import traceback

OUTPUT_KEPT = 4096  # bytes of the child's stdout and stderr kept for the failure message


def isolated(invoke, timeout: float = 60.0, memory_limit=None):
    def call(problem, inputs, want_lse):
        # The visibility closure lives in the native module: materialise what the child may ask for.
        data_r, data_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            status = 0
            try:
                os.setpgid(0, 0)
                os.close(data_r)
                os.close(out_r)
                os.dup2(out_w, 1)
                os.dup2(out_w, 2)
                if memory_limit:
                    import resource
                    resource.setrlimit(resource.RLIMIT_AS, (int(memory_limit), int(memory_limit)))
                try:
                    payload = ("ok", invoke(problem, inputs, want_lse))
                except BaseException as e:  # noqa: BLE001 - everything the callable raises is its failure
                    payload = ("raised", f"{type(e).__name__}: {e}", traceback.format_exc(limit=-3))
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
            pass  # the child set it itself, or is gone
        chunks, output = [], bytearray()
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
                    output += block
                    del output[:-OUTPUT_KEPT]
        if timed_out:
            _kill_group(pid)
        _, status = os.waitpid(pid, 0)
        _kill_group(pid)  # anything it started dies with the call
        for fd in (data_r, out_r):
            try:
                os.close(fd)
            except OSError:
                pass
        said = output.decode(errors="replace").strip()
        tail = f" (its last output: {said[-400:]!r})" if said else ""
        if timed_out:
            raise RuntimeError(f"the isolated call did not return within {timeout:g} s and was killed{tail}")
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            raise RuntimeError(f"the isolated call crashed: {signal.Signals(sig).name} (signal {sig}){tail}")
        if os.WEXITSTATUS(status) != 0 or not chunks:
            raise RuntimeError(f"the isolated call exited with status {os.WEXITSTATUS(status)} before returning{tail}")
        payload = pickle.loads(b"".join(chunks))
        if payload[0] == "raised":
            raise RuntimeError(f"{payload[1]}\n{payload[2]}")
        return payload[1]

    return call


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
