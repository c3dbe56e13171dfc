"""`python -m tessera.ray train CONFIG --num-workers N [...]`: what `tessera train CONFIG --launcher ray`
runs. Prints the workers' lines as they come; exits 0 when the job ends well, 1 when it failed (the
reason on stderr), 3 for a configuration error (a bad config or option, or a worker's), 2 for bad
command-line arguments, 127 when this Python has no Ray.
`python -m tessera.ray tune OUT/ray-search.json [--address A]`: what `tessera tune ... --backend ray`
runs (_tune.py); exits 0 when a trial succeeded, 1 when every trial failed."""
import argparse
import dataclasses
import json
import os
import sys


def parse_resources(parser, items):
    resources = {}
    for item in items:
        name, sep, amount = item.partition("=")
        try:
            resources[name] = float(amount)
        except ValueError:
            sep = ""
        if not sep or not name:
            parser.error(f"--resources takes NAME=AMOUNT (CPU=2, GPU=1), not {item!r}")
    return resources


def parse_workers(parser, text):
    low, sep, high = text.partition(":")
    try:
        return (int(low), int(high)) if sep else int(low)
    except ValueError:
        parser.error(f"--num-workers takes N or MIN:MAX, not {text!r}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tessera.ray", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a TOML config, one tessera worker per Ray actor")
    train.add_argument("config")
    train.add_argument("--num-workers", default="2", help="N, or MIN:MAX (as many as the cluster holds, each attempt)")
    train.add_argument("--address", default=None, help="the Ray cluster (HOST:PORT, or 'auto'; RAY_ADDRESS)")
    train.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    train.add_argument("--resources", action="append", default=[], metavar="NAME=AMOUNT",
                       help="each worker's Ray resources (default CPU=1)")
    train.add_argument("--placement", default="PACK", help="PACK, SPREAD, STRICT_PACK or STRICT_SPREAD")
    train.add_argument("--max-failures", type=int, default=3)
    train.add_argument("--resume", action="store_true", help="start from the newest checkpoint of output_dir")
    train.add_argument("--tessera-bin", default=None)
    train.add_argument("--summary-json", default=None, help="write the Result (but the history) here as JSON")
    search = sub.add_parser("tune", help="run the trials `tessera tune --backend ray` drew as Ray Tune trials")
    search.add_argument("search", help="the ray-search.json that tessera tune wrote")
    search.add_argument("--address", default=None)
    search.add_argument("--tessera-bin", default=None)
    args = parser.parse_args(argv)
    try:
        from ._trainer import _find_tessera_bin
        from ._tune import run_search
    except ImportError as e:
        print(f"tessera.ray needs Ray with Tune in {sys.executable} ({e}): pip install 'ray[tune]', or set "
              "TESSERA_PYTHON to the Python that has it", file=sys.stderr)
        return 127
    if args.command == "tune":
        return run_search(args.search, args.address, _find_tessera_bin(args.tessera_bin))

    from tessera.ray import TesseraTrainer, TrainingFailedError
    try:
        trainer = TesseraTrainer(config=args.config, overrides=args.overrides,
                                 num_workers=parse_workers(train, args.num_workers),
                                 resources_per_worker=parse_resources(train, args.resources) or None,
                                 placement_strategy=args.placement, max_failures=args.max_failures,
                                 resume=args.resume, tessera_bin=args.tessera_bin, address=args.address)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(e, file=sys.stderr)
        return 3
    try:
        result = trainer.fit()
    except TrainingFailedError as e:
        print(e, file=sys.stderr)
        return e.exit_code
    summary = dataclasses.asdict(result)
    del summary["metrics_history"], summary["return_values"]  # the history is in output_dir/metrics.jsonl
    if summary["seconds_to_first_report"] != summary["seconds_to_first_report"]:
        summary["seconds_to_first_report"] = None  # NaN is not JSON
    print(f"tessera.ray: done after {result.attempts} attempt(s); steps lost to restarts: {result.steps_lost}; "
          f"seconds from each failure to training again: {[None if s is None else round(s, 2) for s in result.restart_seconds]}; "
          f"newest checkpoint {result.checkpoint or '(none)'}", file=sys.stderr)
    if args.summary_json:  # whole or absent, never half written
        with open(args.summary_json + ".tmp", "w", encoding="utf-8") as f:
            json.dump(summary, f)
        os.replace(args.summary_json + ".tmp", args.summary_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
