"""What the commands share: messages on standard error, the evaluator chosen, and the facts read
(files, --collect, --launch, --set) into one reader."""
from __future__ import annotations

import dataclasses
import sys
from typing import Any

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.command import read_command
from kbopt.engine.advice.restate import restate
from kbopt.engine.evaluators import durable_available
from kbopt.errors import KboptError
from kbopt.kb.facts import Facts, facts_from_document, merge_documents, merged_document
from kbopt.output import say


def chosen_evaluator(choice: str) -> str:
    if choice == "reference":
        return choice
    problem = durable_available()
    if problem is None:
        return "durable"
    if choice == "durable":
        raise KboptError(f"--evaluator durable: durable_rules does not import here ({problem}); "
                         "use --evaluator reference (same advice) or Python 3.11/3.12")
    print(f"kbopt: note: durable_rules does not import here ({problem}); "
          "using the reference evaluator, which gives the same advice", file=sys.stderr)
    return "reference"


def collected_document(args: Any) -> dict[str, Any]:
    """What `collect` (and `advise --collect`) gathers, as a facts document."""
    # The collectors (NVML, Prometheus, trace readers: about 60 ms of imports) load only when asked.
    from kbopt.commands.collecting import collected_document as collect
    return collect(args)


def facts_reader(args: Any) -> tuple[Any, str, Any, list[str]]:
    """The facts (--collect, or the --facts merged in order) as a reader of (launch overrides, --set
    overrides), their name, and today's launch command (--launch) with the facts it states."""
    if getattr(args, "collect", False):
        document, name = collected_document(args), "collected facts"
        if args.facts:          # the objectives and constraints no telemetry knows, over what was collected
            given, given_name = merged_document(args.facts)
            document, name = merge_documents([document, given]), f"collected facts + {given_name}"
    else:
        document, name = merged_document(args.facts)        # standard input is read once, here
    notes: list[str] = []       # said once the facts read: a note before an error about them would be noise

    def read(launched: Any, overrides: list[str]) -> Facts:
        facts = facts_from_document(document, name, overrides, launched)
        while notes:
            say(notes.pop())
        return facts
    command = None
    if args.launch is not None:
        given = read((), args.overrides).values
        stated = given.get("serving.engine_version")    # the version its flags are read at
        command = read_command(args.launch, stated if isinstance(stated, str) else None)
        if (given.get("workload.engine") not in (None, "other", command.engine) and stated is not None
                and not any(o.startswith("serving.engine_version=") for o in args.overrides)):
            raise KboptError(f"--launch is a {command.engine} command, but the facts say workload.engine = "
                             f"{given.get('workload.engine')} with serving.engine_version = {stated}, a version of that "
                             f"engine: give {command.engine}'s with --set serving.engine_version=VERSION")
        document, set_aside = _without_defaults(document, command.defaults)
        if set_aside:
            one = len(set_aside) == 1
            notes.append(f"kbopt: note: today's command (--launch) does not give {', '.join(f for _, f in set_aside)}: "
                         f"{command.engine} runs {'it' if one else 'them'} at its default, so the facts' "
                         f"{', '.join(fact for fact, _ in set_aside)} {'is' if one else 'are'} set aside "
                         "(give the flag in the command, or --set the fact for a what-if)")
    return read, name, command, command.overrides() if command else []


def _without_defaults(document: dict[str, Any], defaults: tuple[tuple[str, str, Any], ...]
                      ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The facts document without the serving facts today's command leaves at the engine's defaults,
    and those it had (fact, flag); a fact that states the default itself stays, unremarked."""
    serving = document.get("serving")
    found = [(fact, flag) for fact, flag, default in defaults if isinstance(serving, dict)
             and fact.split(".", 1)[1] in serving and (default is None or serving[fact.split(".", 1)[1]] != default)]
    if not found or not isinstance(serving, dict):
        return document, []
    dropped = {fact.split(".", 1)[1] for fact, _ in found}
    return {**document, "serving": {key: value for key, value in serving.items() if key not in dropped}}, found


def what_if(today: Any, changed: Any, overrides: list[str], pack: Any, evaluator: str) -> Any:
    """The advice on the facts as --set changed them: a change of the deployment itself drops the
    measurements of today's and carries today's calibration (engine/advice/restate.py)."""
    set_paths = [item.partition("=")[0].strip() for item in overrides]
    facts, restated = restate(Facts(today.facts, today.provenance), today.derived, changed, set_paths)
    advice = advise(facts, pack, evaluator)
    return dataclasses.replace(advice, restated=restated) if restated else advice
