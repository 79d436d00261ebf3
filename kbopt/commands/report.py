"""`kbopt report`: the advice as an HTML or Markdown report, with what-ifs (--set) and comparisons."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from kbopt.commands.common import chosen_evaluator, facts_reader, what_if
from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.compare import compare
from kbopt.engine.pack.packs import load_checked_pack
from kbopt.errors import EXIT_OK
from kbopt.gctuning import many_advices
from kbopt.kb.facts import load_facts
from kbopt.output import write_output
from kbopt.reports import render


def run(args: Any) -> int:
    pack = load_checked_pack(args.rules)
    read, name, command, launched = facts_reader(args)
    base_facts = read(launched, ())
    evaluator = chosen_evaluator(args.evaluator)
    name = Path(name).name if len(args.facts) == 1 else name     # the label the what-if shows
    with many_advices():
        base = advise(base_facts, pack, evaluator)
        comparison, shown = None, base
        if args.compare:
            shown = advise(load_facts(args.compare, args.overrides), pack, evaluator)
            comparison = compare(base, shown, name, Path(args.compare).name + (" with --set" if args.overrides else ""))
        elif args.overrides:     # a what-if of today's facts, restated as advise restates one
            shown = what_if(base, read(launched, args.overrides), args.overrides, pack, evaluator)
            comparison = compare(base, shown, name, f"{name} with --set")
        write_output(render(shown, args.format, comparison, explain=True, command=command), args.output)
    return EXIT_OK
