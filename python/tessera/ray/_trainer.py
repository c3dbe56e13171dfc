"""TesseraTrainer: a tessera job on a Ray cluster, one tessera worker per Ray actor.

How a job runs (docs/distributed.md, "Ray"):
  1. a placement group reserves one bundle of `resources_per_worker` per worker (`placement_strategy`);
  2. one actor per bundle; actor 0 names its node's address and a free port there, the driver draws a job
     token, and each actor starts `tessera run --nnodes N --node-rank I --master-addr A --master-port P
     -- PROGRAM`: our launcher, so worker I gets the same env contract as on any machine (RANK =
     I, WORLD_SIZE = N, TESSERA_JOB_TOKEN), and node 0's launcher hosts the rendezvous store;
  3. PROGRAM is `tessera train CONFIG` (the C++ trainer) or this node's Python running the training
     function; the driver prints the workers' lines as they come and collects rank 0's metrics;
  4. when an actor or its node dies, or a worker fails, the surviving trainers save the step they hold
     in memory (SIGUSR1, as the elastic agent asks), every actor is ended, and the job starts again in a
     new placement group from the newest checkpoint (`--resume auto`), up to `max_failures` times.
Config, data and output_dir paths are read at the same path on every node (a shared file system, as
under srun); the workers run in the driver's working directory."""
import json
import os
import pickle
import secrets
import shutil
import signal
import subprocess
import sys
import re
import time
from dataclasses import dataclass, field

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ._actor import PYTHON_PLACEHOLDER, TesseraWorkerActor
from ._session import ATTEMPT_VARIABLE, STORAGE_VARIABLE

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
CONFIGURATION_ERROR_EXIT = 3  # tessera's exit status for a bad config or input: no restart can fix it
POLL_S = 1.0                  # each actor answers a poll at least this often
UNANSWERED_POLL_S = 120.0     # no actor answering for this long is Ray itself stuck: the job fails
FAILURE_WINDOW_S = 5.0        # after a worker fails, how long the others get to end and say how
PLACEMENT_RETRY_S = 5.0       # with (min, max) workers: how long one size is tried before counting again


class TrainingFailedError(RuntimeError):
    """The job failed and was not (or no longer) restarted; the message names the rank and why.
    `exit_code`: 3 when no restart could mend it (a configuration error), else 1."""

    def __init__(self, message, exit_code=1):
        super().__init__(message)
        self.exit_code = exit_code


SURVIVOR_SAVED_EXIT = 75  # train/survivor_save.h: a survivor saved the step it held and stopped


def describe_exit(code):
    """A worker's exit status as `tessera run` reports it, in words."""
    if code == CONFIGURATION_ERROR_EXIT:
        return f"status {code} (a configuration or input error)"
    if code == SURVIVOR_SAVED_EXIT:
        return f"status {code} (it saved the step it held and stopped: a peer had failed)"
    if code > 128:
        try:
            return f"status {code} (killed by {signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"status {code}"


@dataclass
class Result:
    """What `fit` returns (Ray Train's Result, plus what tessera measures about its restarts)."""
    metrics: dict                      # rank 0's last record
    metrics_history: list              # rank 0's records over every attempt, each with its "attempt"
    return_values: list                # a training function's return value on each rank (None for a config)
    checkpoint: str                    # a config job: its newest checkpoint directory ("" if none)
    attempts: int                      # 1 + restarts
    failures: list = field(default_factory=list)     # why each failed attempt failed
    # Per restart, in order (None where rank 0 reported nothing to tell it by): the steps rank 0 had done
    # past the step the next attempt started from, and the seconds from the failure seen to rank 0
    # training again. A training function's steps are the "step" values it reports.
    steps_lost: list = field(default_factory=list)
    restart_seconds: list = field(default_factory=list)
    seconds_to_first_report: float = float("nan")    # from fit() to rank 0's first record
    nodes: list = field(default_factory=list)        # each rank's node address in the last attempt
    metrics_by_rank: list = field(default_factory=list)  # each rank's last record in the last attempt ({} if none)
    world_sizes: list = field(default_factory=list)  # the workers each attempt started (num_workers=(min, max))


def _find_tessera_bin(given):
    candidates = [given, os.environ.get("TESSERA_BIN"), shutil.which("tessera"),
                  # the build tree: build/python/tessera/ray/ -> build/tessera
                  os.path.join(os.path.dirname(__file__), "..", "..", "..", "tessera")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    raise FileNotFoundError("tessera.ray: the tessera program was not found: pass tessera_bin=, set TESSERA_BIN, or "
                            "put `tessera` on the PATH (every node runs it at the same path)")


def _worker_bounds(num_workers):
    """(min, max) workers from an int N (N, N) or a pair; ValueError unless 1 <= min <= max."""
    low, high = (num_workers, num_workers) if isinstance(num_workers, int) else tuple(num_workers)
    if not all(isinstance(n, int) for n in (low, high)) or not 1 <= low <= high:
        raise ValueError(f"TesseraTrainer: num_workers must be a positive integer or (min, max) with 1 <= min <= max, "
                         f"not {num_workers!r}")
    return low, high


def _check_options(train_func, config, resources_per_worker, placement_strategy, max_failures):
    if (train_func is None) == (config is None):
        raise ValueError("TesseraTrainer takes a training function or a config (a TOML path), exactly one of them")
    if train_func is not None and not callable(train_func):
        raise TypeError(f"TesseraTrainer: train_func must be callable, not a {type(train_func).__name__}")
    for name, amount in resources_per_worker.items():
        if not isinstance(amount, (int, float)) or amount < 0:
            raise ValueError(f"TesseraTrainer: resources_per_worker[{name!r}] = {amount!r} is not a non-negative number")
    if placement_strategy not in PLACEMENT_STRATEGIES:
        raise ValueError(f"TesseraTrainer: placement_strategy {placement_strategy!r} is not one of "
                         f"{', '.join(PLACEMENT_STRATEGIES)}")
    if not isinstance(max_failures, int) or max_failures < 0:
        raise ValueError(f"TesseraTrainer: max_failures must be a non-negative integer, not {max_failures!r}")


class TesseraTrainer:
    """Runs a tessera job on Ray: `TesseraTrainer(config="examples/mlp.toml", num_workers=2).fit()`, or
    `TesseraTrainer(train_func, train_loop_config={...}, num_workers=2).fit()` where train_func calls
    tessera.distributed.init_process_group() and tessera.ray.report(...)."""

    def __init__(self, train_func=None, *, config=None, overrides=(), train_loop_config=None, num_workers=2,
                 resources_per_worker=None, placement_strategy="PACK", max_failures=3, storage_path="",
                 resume=False, tessera_bin=None, env=None, address=None, placement_timeout_s=120.0,
                 stop_grace_s=30.0, timeout_s=None, on_report=None, verbose=True):
        resources = dict(resources_per_worker or {"CPU": 1})
        _check_options(train_func, config, resources, placement_strategy, max_failures)
        self._train_func = train_func
        self._config = os.path.abspath(config) if config is not None else None
        self._overrides = list(overrides)
        self._train_loop_config = train_loop_config
        # (min, max): each attempt starts as many workers as the cluster's live nodes hold, within them;
        # a config then needs train.global_batch_size, which every world size trains alike.
        self._min_workers, self._max_workers = _worker_bounds(num_workers)
        self._resources = resources
        self._placement_strategy = placement_strategy
        self._max_failures = max_failures
        self._storage_path = os.path.abspath(storage_path) if storage_path else ""
        self._resume = resume
        self._tessera_bin = _find_tessera_bin(tessera_bin)
        self._env = dict(env or {})
        self._address = address
        self._placement_timeout_s = placement_timeout_s
        self._stop_grace_s = stop_grace_s
        self._timeout_s = timeout_s  # the whole job, every attempt; None: no limit
        self._on_report = on_report
        self._verbose = verbose
        self._cwd = os.getcwd()
        self._output_dir = self._resolve_output_dir() if config is not None else ""

    # --- the job ---------------------------------------------------------------------------------

    def fit(self):
        """Runs the job to its end, restarting it after failures; returns a Result or raises
        TrainingFailedError naming the rank and why."""
        submitted = time.monotonic()
        if not ray.is_initialized():
            ray.init(address=self._address, include_dashboard=False, log_to_driver=False)
        history, failures, steps_lost, restart_seconds, first_report, world_sizes = [], [], [], [], None, []
        attempt, step_before_failure, failure_seen = 0, None, None
        deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
        while True:
            run = _Attempt(self, attempt, resume=self._resume or attempt > 0, deadline=deadline)
            outcome = run.execute()
            world_sizes.append(len(outcome.nodes))
            started_at = outcome.rank0_records[0]["_received"] if outcome.rank0_records else None
            for record in outcome.rank0_records:
                if first_report is None:
                    first_report = record["_received"] - submitted
                del record["_received"]
                history.append(record)
            if attempt > 0:  # this attempt is a restart: what the failure before it cost
                restart_seconds.append(None if started_at is None else started_at - failure_seen)
                known = step_before_failure is not None and outcome.starts_after is not None
                steps_lost.append(max(0, step_before_failure - outcome.starts_after) if known else None)
            if outcome.last_step is not None:
                step_before_failure = outcome.last_step
            if outcome.failure is None:
                return Result(metrics=history[-1] if history else {}, metrics_history=history,
                              return_values=outcome.return_values, checkpoint=self._newest_checkpoint(),
                              attempts=attempt + 1, failures=failures, steps_lost=steps_lost,
                              restart_seconds=restart_seconds,
                              seconds_to_first_report=float("nan") if first_report is None else first_report,
                              nodes=outcome.nodes,
                              metrics_by_rank=[outcome.last_by_rank.get(r, {}) for r in range(len(outcome.nodes))],
                              world_sizes=world_sizes)
            failures.append(outcome.failure)
            failure_seen = outcome.failed_at
            if not outcome.retryable or len(failures) > self._max_failures:
                why = ("not retried: no restart can mend it" if not outcome.retryable else
                       f"{len(failures)} failures, max_failures = {self._max_failures}")
                raise TrainingFailedError(f"tessera.ray: the job failed ({why}): {outcome.failure}",
                                          exit_code=outcome.exit_code)
            self._say(f"tessera.ray: attempt {attempt} failed: {outcome.failure}\ntessera.ray: restarting from the "
                      f"newest checkpoint (failure {len(failures)} of at most {self._max_failures})")
            attempt += 1

    # --- what the attempts share -----------------------------------------------------------------

    def _say(self, text):
        if self._verbose:
            print(text, file=sys.stderr, flush=True)

    def _resolve_output_dir(self):
        command = self._train_command() + ["--print-config"]
        try:
            proc = subprocess.run(command, cwd=self._cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=60)
        except subprocess.TimeoutExpired as e:
            raise ValueError(f"tessera.ray: `{' '.join(command)}` did not answer within 60 s") from e
        if proc.returncode != 0:
            raise ValueError(f"tessera.ray: the config {self._config} does not load: {proc.stdout.strip()}")
        # --print-config writes each key on a line of its own (train/config.h to_toml); only [train]'s
        # output_dir is wanted, so no TOML parser is needed (tomllib came with Python 3.11).
        section = re.search(r"^\[train\]\n(.*?)(?=^\[|\Z)", proc.stdout, re.M | re.S)
        match = re.search(r'^output_dir\s*=\s*"((?:[^"\\]|\\.)*)"', section.group(1) if section else "", re.M)
        output_dir = json.loads(f'"{match.group(1)}"') if match else ""
        return os.path.join(self._cwd, output_dir) if output_dir else ""

    def _newest_checkpoint(self):
        steps = os.path.join(self._output_dir, "checkpoints") if self._output_dir else ""
        if not steps or not os.path.isdir(steps):
            return ""
        numbered = [(int(n[5:]), n) for n in os.listdir(steps) if n.startswith("step-") and n[5:].isdigit()]
        return os.path.join(steps, max(numbered)[1]) if numbered else ""

    def _train_command(self):
        command = [self._tessera_bin, "train", self._config]
        for s in self._overrides:
            command += ["--set", s]
        return command

    def _program(self, resume):
        if self._config is not None:
            # A restart (or resume=True) takes the newest checkpoint of output_dir if there is one.
            return self._train_command() + (["--resume", "auto"] if resume else [])
        return [PYTHON_PLACEHOLDER, "-m", "tessera.ray._function_worker"]

    def _worker_settings(self, token, attempt):
        """What each worker's environment gets on top of its actor's own (the actor drops the launcher's
        contract variables first: `tessera run` sets them)."""
        settings = dict(self._env)
        settings["TESSERA_JOB_TOKEN"] = token
        settings.setdefault("TESSERA_NUM_THREADS", str(max(1, int(self._resources.get("CPU", 1)))))
        # The survivors of a failed attempt save the step they hold (train/survivor_save.h) as under the
        # elastic agent, whose generations these attempts are; a restarted one resumes from it.
        settings["TESSERA_ELASTIC_GENERATION"] = str(attempt)
        settings["TESSERA_RESTART_COUNT"] = str(attempt)
        settings[ATTEMPT_VARIABLE] = str(attempt)
        settings[STORAGE_VARIABLE] = self._storage_path
        # A training function is loaded by reference from the driver's own modules (its script's folder,
        # the tessera package): those folders, never the driver's Python installation (another node's
        # Python may be another version).
        installed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        own = [os.path.abspath(p) for p in sys.path
               if p and os.path.isdir(p) and not any(os.path.realpath(p).startswith(i + os.sep) for i in installed)]
        settings["PYTHONPATH"] = os.pathsep.join(own)
        return settings

    def _function_bytes(self):
        if self._train_func is None:
            return None
        return ray.cloudpickle.dumps((self._train_func, self._train_loop_config))


class _Outcome:
    def __init__(self):
        self.failure = None          # why the attempt failed (None: every worker exited 0)
        self.failed_at = None        # time.monotonic() when the driver saw it
        self.retryable = True
        self.exit_code = 1           # the driver's exit status if this failure ends the job
        self.rank0_records = []
        self.return_values = []
        self.starts_after = None     # the step rank 0 started (or resumed) after
        self.last_step = None        # the last step rank 0 reported done
        self.nodes = []              # each rank's node address
        self.last_by_rank = {}       # rank -> the last record it reported


class _Attempt:
    """One start of the job in one placement group, to its end."""

    def __init__(self, trainer, attempt, resume, deadline):
        self.t = trainer
        self.attempt = attempt
        self.resume = resume
        self.deadline = deadline  # time.monotonic() past which the job has run too long (None: never)
        self.outcome = _Outcome()
        self.tails = {}  # rank -> its last output lines, for the failure message
        self.pending = {}  # poll requests in flight -> rank: their answers hold lines and records too
        self.workers = trainer._max_workers  # this attempt's world size (_place chooses it)

    def execute(self):
        t = self.t
        pg, actors = None, []
        try:
            pg = self._place()
            if pg is None:
                return self.outcome
            actors = [self._make_actor(pg, i) for i in range(self.workers)]
            if self._start(actors):
                self._watch(actors)
        finally:
            if self.outcome.failure is not None:
                self.outcome.failed_at = time.monotonic()
            self._end(actors)
            if pg is not None:
                remove_placement_group(pg)
        return self.outcome

    def _place(self):
        """A placement group of as many bundles as can be placed, within (min, max) workers; None (and the
        outcome's failure) if not even min can be within placement_timeout_s. The count is estimated from
        the live nodes and tried for a few seconds at a time: a node lost a moment ago may still count
        as live until Ray's health checks mark it dead."""
        t = self.t
        deadline = time.monotonic() + t._placement_timeout_s
        while True:
            self.workers = self._workers_that_fit()
            pg = placement_group([dict(t._resources) for _ in range(self.workers)], strategy=t._placement_strategy)
            wait_s = max(0.1, deadline - time.monotonic())
            if t._min_workers < t._max_workers:
                wait_s = min(wait_s, PLACEMENT_RETRY_S)
            try:
                ray.get(pg.ready(), timeout=wait_s)
                return pg
            except GetTimeoutError:
                remove_placement_group(pg)
            if time.monotonic() >= deadline:
                break
        # A first start that cannot be placed will not be placed by trying again; a restart may be waiting
        # for a lost node's replacement, and counts as one more failure.
        self.outcome.retryable = self.attempt > 0
        self.outcome.failure = (f"{self.workers} workers of {t._resources} could not be placed "
                                f"({t._placement_strategy}) within {t._placement_timeout_s:g} s; the cluster has "
                                f"{ray.available_resources()} free")
        return None

    def _workers_that_fit(self):
        t = self.t
        if t._min_workers == t._max_workers:
            return t._max_workers
        per_node = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            have = node.get("Resources", {})
            per_node.append(min((int(have.get(k, 0) // v) for k, v in t._resources.items() if v > 0), default=0))
        fits = (sum(1 for n in per_node if n >= 1) if t._placement_strategy == "STRICT_SPREAD" else
                max(per_node, default=0) if t._placement_strategy == "STRICT_PACK" else sum(per_node))
        return max(t._min_workers, min(t._max_workers, fits))

    def _make_actor(self, pg, index):
        t = self.t
        custom = {k: v for k, v in t._resources.items() if k not in ("CPU", "GPU", "memory")}
        python_path = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return TesseraWorkerActor.options(
            num_cpus=t._resources.get("CPU", 0), num_gpus=t._resources.get("GPU", 0), resources=custom,
            memory=t._resources.get("memory"), max_concurrency=4,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=index),
            # The actor's own module: importable wherever the driver's tessera package is.
            runtime_env={"env_vars": {"PYTHONPATH": python_path}}).remote()

    def _start(self, actors):
        """Starts every worker; False (and the outcome's failure, naming the rank) if one cannot start."""
        t = self.t
        rank = 0
        try:
            for rank, actor in enumerate(actors):
                self.outcome.nodes.append(ray.get(actor.node_address.remote(), timeout=t._placement_timeout_s))
            rank = 0
            address = self.outcome.nodes[0]
            port = ray.get(actors[0].free_port.remote(address), timeout=t._placement_timeout_s)
            settings = t._worker_settings(secrets.token_hex(16), self.attempt)
            program = t._program(self.resume)
            function_bytes = t._function_bytes()
            metrics_file = os.path.join(t._output_dir, "metrics.jsonl") if t._output_dir else None
            starts = []
            for rank, actor in enumerate(actors):
                command = [t._tessera_bin, "run", "--nnodes", str(len(actors)), "--node-rank", str(rank),
                           "--nproc-per-node", "1", "--master-addr", address, "--master-port", str(port), "--",
                           *program]
                starts.append(actor.start.remote(command, settings, t._cwd, metrics_file if rank == 0 else None,
                                                 function_bytes))
            for rank, start in enumerate(starts):
                ray.get(start, timeout=t._placement_timeout_s)
        except (RayError, OSError) as e:
            node = f" on {self.outcome.nodes[rank]}" if rank < len(self.outcome.nodes) else ""
            self.outcome.failure = f"rank {rank}'s worker could not start{node}: {_first_line(e)}"
            return False
        t._say(f"tessera.ray: attempt {self.attempt}: {len(actors)} workers started, rendezvous at {address}:{port}")
        return True

    def _watch(self, actors):
        t = self.t
        pending = self.pending
        pending.update({actor.poll.remote(POLL_S): rank for rank, actor in enumerate(actors)})
        exit_codes = {}
        results = [None] * len(actors)
        first_failure_at = None
        while pending:
            now = time.monotonic()
            if self.deadline is not None and now > self.deadline:
                self.outcome.retryable = False
                self.outcome.failure = f"the job ran past timeout_s ({t._timeout_s:g} s); ranks {sorted(pending.values())} still running"
                return
            if first_failure_at is not None and now - first_failure_at > FAILURE_WINDOW_S:
                break  # the others have had their moment to say how they ended
            wait_s = UNANSWERED_POLL_S if self.deadline is None else min(UNANSWERED_POLL_S, max(0.1, self.deadline - now))
            if first_failure_at is not None:
                wait_s = min(wait_s, max(0.1, first_failure_at + FAILURE_WINDOW_S - now))
            done, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
            if not done:
                if first_failure_at is not None or (self.deadline is not None and time.monotonic() > self.deadline):
                    continue  # the window's end or the deadline: said at the top of the loop
                self.outcome.failure = (f"no worker's actor answered for {UNANSWERED_POLL_S:g} s (ranks "
                                        f"{sorted(pending.values())}): Ray itself is stuck")
                return
            ref = done[0]
            rank = pending.pop(ref)
            try:
                update = ray.get(ref)
            except RayActorError as e:
                # The actor itself is gone: its node was lost or it was killed. That is the cause.
                self.outcome.failure = (f"rank {rank}'s actor died (its node lost, or the actor killed): "
                                        f"{_first_line(e)}{self._tail_of(rank)}")
                return
            except RayError as e:
                self.outcome.failure = f"rank {rank}'s actor failed to report: {_first_line(e)}{self._tail_of(rank)}"
                return
            self._take(rank, update)
            if update["exit_code"] is None:
                pending[actors[rank].poll.remote(POLL_S)] = rank
                continue
            exit_codes[rank] = update["exit_code"]
            results[rank] = pickle.loads(update["result"]) if update["result"] else None
            if update["exit_code"] != 0 and first_failure_at is None:
                first_failure_at = time.monotonic()
        if first_failure_at is None:
            self.outcome.return_values = results
            return
        self._blame(exit_codes, set(pending.values()))

    def _blame(self, exit_codes, still_running):
        """The failure of an attempt that ended in nonzero exits. The rank blamed is the likeliest cause:
        a configuration error first, then a rank killed by a signal, then any other error, and a survivor
        that saved and stopped because of a peer (75) last; among equals, the first exit that arrived. (A
        survivor whose own collective failed on the lost peer exits 1, after the peer's death.)"""
        failed = {rank: code for rank, code in exit_codes.items() if code != 0}

        def likeliness(code):
            return (0 if code == CONFIGURATION_ERROR_EXIT else 1 if code > 128 else
                    3 if code == SURVIVOR_SAVED_EXIT else 2)

        order = list(failed)  # the order the exits arrived
        rank = min(order, key=lambda r: (likeliness(failed[r]), order.index(r)))
        others = [f"rank {r}: {describe_exit(c)}" for r, c in sorted(exit_codes.items()) if r != rank]
        others += [f"rank {r}: still running" for r in sorted(still_running)]
        configuration = failed[rank] == CONFIGURATION_ERROR_EXIT
        self.outcome.retryable = not configuration
        self.outcome.exit_code = CONFIGURATION_ERROR_EXIT if configuration else 1
        then = f" (then {'; '.join(others)})" if others else ""
        self.outcome.failure = f"rank {rank} exited with {describe_exit(failed[rank])}{then}{self._tail_of(rank)}"

    def _take(self, rank, update):
        t = self.t
        tail = self.tails.setdefault(rank, [])
        for line in update["lines"]:
            if t._verbose:
                print(line, flush=True)
            tail.append(line)
        del tail[:-20]
        if update["dropped_lines"]:
            t._say(f"tessera.ray: rank {rank}: {update['dropped_lines']} output lines dropped (the driver fell behind)")
        if update["metrics"]:
            self.outcome.last_by_rank[rank] = dict(update["metrics"][-1], attempt=self.attempt)
        if rank != 0:
            return
        now = time.monotonic()
        for record in update["metrics"]:
            record["attempt"] = self.attempt
            step = record.get("step")
            if isinstance(step, int):
                # The trainer's first record ({"type": "start", "step": S}) names the step it starts
                # after; a training function's first report is the step after it.
                starts_after = step if record.get("type") == "start" else step - 1
                if self.outcome.starts_after is None:
                    self.outcome.starts_after = starts_after
                if record.get("type") != "start":
                    self.outcome.last_step = step
            if t._on_report is not None:
                t._on_report(dict(record))
            record["_received"] = now
            self.outcome.rank0_records.append(record)

    def _tail_of(self, rank):
        lines = self.tails.get(rank)
        return "" if not lines else "; its last lines:\n  " + "\n  ".join(lines[-8:])

    def _end(self, actors):
        """Ends every actor: the survivors of a failure first save what they hold in memory."""
        t = self.t
        if not actors:
            return
        failed = self.outcome.failure is not None
        for ref, rank in self.pending.items():
            try:
                self._take(rank, ray.get(ref, timeout=POLL_S + 10))
            except RayError:
                pass  # this one's actor is gone
        stops = [a.stop.remote(failed and t._config is not None, t._stop_grace_s) for a in actors]
        ray.wait(stops, num_returns=len(stops), timeout=2 * t._stop_grace_s + 10)
        for rank, actor in enumerate(actors):
            try:
                self._take(rank, ray.get(actor.poll.remote(0), timeout=10))
                ray.get(actor.close.remote(), timeout=10)
            except RayError:
                pass  # this one's actor is gone: nothing of it to take or clean
            ray.kill(actor)


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
