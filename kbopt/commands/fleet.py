"""`kbopt fleet`: every deployment a Prometheus server scrapes, advised."""
from __future__ import annotations

import sys
import time
from typing import Any

from kbopt.collectors.fleet import PrometheusClient, read_fleet
from kbopt.commands.common import chosen_evaluator
from kbopt.engine.pack.packs import load_checked_pack
from kbopt.errors import EXIT_OK, KboptError
from kbopt.fleet import build_fleet, fleet_files, fleet_lines, summary_text, write_directory
from kbopt.gctuning import many_advices
from kbopt.output import write_output


def run(args: Any) -> int:
    started = time.monotonic()
    pack = load_checked_pack(args.rules)
    evaluator = chosen_evaluator(args.evaluator)
    client = PrometheusClient(args.prometheus, timeout_s=args.timeout, retries=max(0, args.retries))
    read = read_fleet(client, args.window, args.selector)
    if not read.replicas:
        raise KboptError(f"--prometheus {args.prometheus}: no vLLM, SGLang, TGI or Triton series"
                         + (f" under {args.selector}" if args.selector else "") + f" over the last {args.window} "
                         f"({read.queries} queries); is the engine's /metrics scraped?")
    with many_advices():         # one advice per replica, in this process
        fleet = build_fleet(read, pack, evaluator, args.prometheus, args.selector, started)
    if args.output:
        write_directory(fleet_files(fleet), args.output)
    else:
        write_output(fleet_lines(fleet), None)
    sys.stderr.write(summary_text(fleet))       # its label values made inert by terminal_text
    return EXIT_OK
