"""The Ray actor that holds one tessera worker: it runs `tessera run --nnodes N --node-rank I -- PROGRAM`
(our launcher, so the worker gets the same env contract as on any node: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, TESSERA_JOB_TOKEN; node 0's launcher hosts the rendezvous store) and hands the driver its
output lines, its metrics records and its exit code as they come."""
import collections
import ctypes
import json
import os
import signal
import socket
import subprocess
import shutil
import tempfile
import sys
import threading

import ray

from ._session import METRICS_FILE_VARIABLE, RESULT_FILE_VARIABLE

MAX_LINE_CHARS = 16 * 1024       # a longer output line is cut (the driver says so)
MAX_BUFFERED_LINES = 10_000      # lines the driver has not taken yet; older ones are dropped and counted
PYTHON_PLACEHOLDER = "<python>"  # in a command: this node's Python (the one its Ray workers run)


# Loaded here, not in the forked child: loading a library between fork and exec in a process with
# threads (a Ray worker has many) can deadlock.
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
_PR_SET_PDEATHSIG = 1
# The launcher's contract (dist/launcher/env.h): set by `tessera run` itself, never inherited.
CONTRACT_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
                      "MASTER_PORT", "TESSERA_ROLE", "TESSERA_JOB_TOKEN")


def _die_with(parent):
    """A preexec_fn: the child is killed when `parent` (this actor's process) ends (ray.kill, a lost
    node), never left behind; if the parent is gone already, the child does not start."""
    def arrange():
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
    return arrange


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


class _MetricsTail:
    """The records appended to a JSON-lines file since the last read (a partial last line waits)."""

    def __init__(self, path, from_start):
        self.path = path
        self.inode = None
        self.offset = 0
        if not from_start and os.path.exists(path):
            stat = os.stat(path)
            self.inode, self.offset = stat.st_ino, stat.st_size

    def read(self):
        try:
            with open(self.path, "rb") as f:
                inode = os.fstat(f.fileno()).st_ino
                if inode != self.inode:  # a new file (the trainer moved an old run's aside): from its start
                    self.inode, self.offset = inode, 0
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        records = []
        for line in data[:end].splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                pass  # not a record of ours
        return records


@ray.remote
class TesseraWorkerActor:
    def __init__(self):
        self._process = None
        self._lines = collections.deque()
        self._dropped_lines = 0
        self._changed = threading.Condition()
        self._exit_code = None
        self._tail = None
        self._scratch = tempfile.mkdtemp(prefix="tessera-ray-")
        self._result_path = os.path.join(self._scratch, "result.pickle")

    def node_address(self):
        """The address the other workers reach this node at (Ray's own node address)."""
        return ray.util.get_node_ip_address()

    def free_port(self, address):
        """A port free on this node now, for node 0's rendezvous store (the launcher binds it next)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
            return s.getsockname()[1]

    def start(self, command, settings, cwd, metrics_file=None, function_bytes=None):
        """Starts the launcher. `settings`: the variables the driver sets on top of this actor's own
        environment (Ray's CUDA_VISIBLE_DEVICES and the node's paths stay as Ray gave them; its
        PYTHONPATH is put before the node's). `metrics_file`: a trainer's metrics.jsonl to stream (rank 0
        of a config job); otherwise the worker's report() records are streamed. `function_bytes`: a
        pickled training function, written here for the worker to load."""
        env = dict(os.environ)
        for name in CONTRACT_VARIABLES:
            env.pop(name, None)
        settings = dict(settings)
        extra_path = settings.pop("PYTHONPATH", "")
        env.update(settings)
        if extra_path:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH", "")) if p)
        command = [sys.executable if part == PYTHON_PLACEHOLDER else part for part in command]
        own_metrics = os.path.join(self._scratch, "metrics.jsonl")
        env[METRICS_FILE_VARIABLE] = own_metrics
        env[RESULT_FILE_VARIABLE] = self._result_path
        if function_bytes is not None:
            path = os.path.join(self._scratch, "function.pickle")
            with open(path, "wb") as f:
                f.write(function_bytes)
            env["TESSERA_RAY_FUNCTION"] = path
        self._tail = _MetricsTail(metrics_file or own_metrics, from_start=metrics_file is None)
        self._process = subprocess.Popen(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, preexec_fn=_die_with(os.getpid()))
        reader = threading.Thread(target=self._read_output, daemon=True)
        reader.start()
        threading.Thread(target=self._wait_for_exit, args=(reader,), daemon=True).start()
        return self._process.pid

    def _wait_for_exit(self, reader):
        # The exit code comes from wait(), not from the end of the output: a process the worker left
        # behind may hold the pipe open. Its last lines get a moment to arrive first.
        code = self._process.wait()
        reader.join(timeout=5)
        with self._changed:
            self._exit_code = code
            self._changed.notify_all()

    def _read_output(self):
        for raw in self._process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f" [tessera.ray: line cut at {MAX_LINE_CHARS} characters]"
            with self._changed:
                if len(self._lines) == MAX_BUFFERED_LINES:
                    self._lines.popleft()
                    self._dropped_lines += 1
                self._lines.append(line)
                self._changed.notify_all()

    def poll(self, timeout_s):
        """What happened since the last poll, waiting up to timeout_s for something to happen: new lines,
        new metrics records, and the exit code (with a training function's pickled return value) once the
        launcher has ended."""
        with self._changed:
            self._changed.wait_for(lambda: self._lines or self._exit_code is not None, timeout=timeout_s)
            lines, dropped = list(self._lines), self._dropped_lines
            self._lines.clear()
            self._dropped_lines = 0
            code = self._exit_code
            # Under the same lock: two polls at once (one the driver gave up waiting for) never read the
            # file from one offset twice.
            metrics = self._tail.read() if self._tail else []
        update = {"lines": lines, "dropped_lines": dropped, "metrics": metrics, "exit_code": code, "result": None}
        if code == 0 and os.path.exists(self._result_path):
            with open(self._result_path, "rb") as f:
                update["result"] = f.read()
        return update

    def stop(self, save_first, grace_s):
        """Ends the worker: with `save_first`, SIGUSR1 first asks a tessera trainer to save the step it
        holds in memory (train/survivor_save.h, as the elastic agent asks); then SIGTERM to the launcher,
        which stops its worker; SIGKILL after grace_s. Returns the exit code (None if never started)."""
        if self._process is None or self._process.poll() is not None:
            return None if self._process is None else self._process.returncode
        if save_first:
            for pid in _children(self._process.pid):
                try:
                    os.kill(pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
            try:
                return self._process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._process.terminate()
        try:
            return self._process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            return self._process.wait()

    def close(self):
        """Removes this worker's scratch files (after the driver's last poll)."""
        shutil.rmtree(self._scratch, ignore_errors=True)
