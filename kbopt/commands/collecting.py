"""Facts gathered from what a deployment already exposes (`collect`, `advise --collect`)."""
from __future__ import annotations

from typing import Any

from kbopt.collectors import run as collectors
from kbopt.collectors.traces import TraceOptions
from kbopt.errors import KboptError
from kbopt.output import say


def collected_document(args: Any) -> dict[str, Any]:
    columns = {}
    for item in filter(None, (args.columns or "").split(",")):
        key, sep, column = item.partition("=")
        if not sep or key not in ("timestamp", "prompt", "output", "total", "duration"):
            raise KboptError(f"--columns {args.columns}: expected KEY=COLUMN pairs with KEY one of "
                             "timestamp, prompt, output, total, duration")
        columns[key] = column
    trace = TraceOptions(format=args.trace_format, long_threshold=args.long_threshold, window_s=args.window,
                         columns=columns, time_unit=args.time_unit)
    collected = collectors.collect(collectors.CollectOptions(metrics=tuple(args.metrics), workloads=tuple(args.workload), model=args.model,
                                       nvml=not args.no_nvml, gpu=args.gpu, duration_s=args.duration,
                                       interval_s=args.interval, trace=trace))
    for note in collected.notes:
        say(f"kbopt: note: {note}")
    return collected.document()
