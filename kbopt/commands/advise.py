"""`kbopt advise`: the advice on one deployment's facts (files, --collect, --launch, --set), or on
each line of a --facts-jsonl stream."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from kbopt.commands.common import chosen_evaluator, facts_reader, what_if
from kbopt.engine.advice.advisor import advise
from kbopt.engine.pack.packs import load_checked_pack
from kbopt.errors import EXIT_BAD_INPUT, EXIT_OK, KboptError
from kbopt.gctuning import many_advices
from kbopt.output import write_output
from kbopt.reports import render


def run(args: Any) -> int:
    pack = load_checked_pack(args.rules)        # broken rules fail before a long collection
    if not (args.facts or args.collect or args.facts_jsonl is not None):
        raise KboptError("advise needs facts: --facts FILE (repeatable), --collect (with --facts files merged over "
                         "what it collects), or --facts-jsonl FILE")
    if args.collect and args.facts_jsonl is not None:
        raise KboptError("--collect and --facts-jsonl: give one (--facts-jsonl advises documents already written)")
    if args.facts_jsonl is not None:
        if args.launch is not None or args.emit:
            raise KboptError(f"{'--launch' if args.launch is not None else '--emit'} is for one deployment: use it with "
                             "--facts or --collect, not --facts-jsonl")
        return _advise_lines(args, pack)
    read, name, command, launched = facts_reader(args)
    facts = read(launched, args.overrides)   # bad input before anything is said
    evaluator = chosen_evaluator(args.evaluator)
    # Even one advice set off collections that walked the whole loaded pack (kbopt.gctuning).
    with many_advices():
        today = advise(read(launched, ()), pack, evaluator) if args.overrides else None
        advice = what_if(today, facts, args.overrides, pack, evaluator) if today else advise(facts, pack, evaluator)
        if args.emit:
            # The launch script's path: loaded only for --emit (a few ms of every cold advise otherwise).
            from kbopt.engine.advice.migrate import advice_for
            from kbopt.reports.emit import render_emit  # with the line above: only for --emit
            engine, _, version = args.emit.partition("@")
            advice = advice_for(advice, engine, pack, evaluator, version or None)
            write_output(render_emit(advice, engine, command), args.output)
            return EXIT_OK
        comparison = None
        if today and args.format in ("html", "md"):
            from kbopt.engine.advice.compare import compare  # only a --set what-if's report compares
            comparison = compare(today, advice, name, "with --set")
        write_output(render(advice, args.format, comparison, args.explain, command), args.output)
    return EXIT_OK


def _advise_lines(args: Any, pack: Any) -> int:
    # The batch runner (worker processes, streamed output) loads only for --facts-jsonl.
    from kbopt.batch import advise_stream, input_lines, streamed_output
    if args.format not in ("text", "json"):
        raise KboptError(f"--facts-jsonl writes JSON lines; --format {args.format} is for one facts file")
    evaluator = chosen_evaluator(args.evaluator)
    source = "-" if args.facts_jsonl == "-" else Path(args.facts_jsonl).name
    # With --jobs 1 this process advises every line itself (the workers tune their own).
    with streamed_output(args.output) as out, many_advices():
        count, failed = advise_stream(input_lines(args.facts_jsonl), out, pack, evaluator, source, tuple(args.overrides),
                                      jobs=args.jobs if args.jobs > 0 else (os.cpu_count() or 1))
    if failed:
        print(f"kbopt: error: {failed} of {count} lines could not be advised (their error records name them)", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK
