"""`kbopt rules`: list, show, lint, test, new, docs and graph for rule packs."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kbopt.diagnostics import render_all
from kbopt.engine.authoring import docs as authoring
from kbopt.engine.authoring.docs import scaffold
from kbopt.engine.authoring.examples import leaf_coverage, run_examples
from kbopt.engine.authoring.lint import lint_paths
from kbopt.engine.evaluators import available_evaluators
from kbopt.engine.pack.loader import load_pack
from kbopt.engine.pack.packs import builtin_pack, configured_packs
from kbopt.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, KboptError
from kbopt.kb import citations
from kbopt.reports.escape import terminal_message, terminal_text


def run(args: Any) -> int:
    if args.rules_command == "lint":
        return _lint(args)
    if args.rules_command == "new":
        print(f"wrote {scaffold(args.dir, args.layer, args.name, builtin_pack())}")
        return EXIT_OK
    # Authoring commands load packs as they are (`test` must run on a rule still being written),
    # over the built-in pack as the cache holds it.
    dirs = list(dict.fromkeys(list(args.rules) + list(getattr(args, "paths", []) or [])))
    pack = load_pack(dirs, builtin_pack() if dirs else None)
    if args.rules_command in ("show", "docs", "graph"):
        if args.rules_command == "show":
            sys.stdout.write(terminal_message(authoring.show(pack, args.rule_id)))
        elif args.rules_command == "docs":
            try:
                written = authoring.write_docs(pack, Path(args.output))
            except OSError as error:
                raise KboptError(f"rules docs -o {args.output}: cannot write there: {error.strerror}") from None
            print(f"wrote {written} pages under {args.output}")
        else:
            sys.stdout.write(authoring.graph_text(pack, args.format))
        return EXIT_OK
    if args.rules_command == "list":
        for rule in pack.rules:
            if args.layer in (None, rule.layer) and (args.tag is None or args.tag in rule.tags):
                pack_name = "" if rule.pack == "builtin" else f"  (pack {rule.pack})"
                print(terminal_text(f"{rule.id:38} {rule.layer:11} {rule.title}  [{citations.labels(rule.sources)}]{pack_name}"))
        return EXIT_OK
    evaluators = available_evaluators()
    tested = list(pack.rules)
    if getattr(args, "paths", None) and not args.all_rules:     # the pack author's rules, not the project's
        tested = [rule for rule in pack.rules if rule.pack != "builtin"]
        print(terminal_text(f"testing the {len(tested)} rule(s) of {', '.join(args.paths)} (--all adds the built-in ones)"))
    results = run_examples(pack, evaluators, tested)
    failed = [r for r in results if not r.ok]
    for result in failed:
        for failure in result.failures:
            print(terminal_message(f"FAIL {result.rule} / {result.example!r} ({result.evaluator}) at {result.location}: {failure}"))
    decided_both = [r.id for r in tested if {True, False} <= {e.fires for e in r.examples}]
    both_ways, leaves = leaf_coverage(results)
    print(f"coverage: {len(decided_both)}/{len(tested)} rules have an example that fires and one decided false; "
          f"{both_ways}/{leaves} comparisons are seen both true and false")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed "
          f"({sum(len(r.examples) for r in tested)} examples x {len(evaluators)} evaluator(s))")
    return EXIT_FAILED if failed else EXIT_OK


def _lint(args: Any) -> int:
    paths = list(dict.fromkeys(list(args.paths) or configured_packs()))
    findings, checked = lint_paths(paths, builtin_pack() if paths else None)
    sys.stdout.write(terminal_message(render_all(findings)))
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    print(f"{errors} error(s), {warnings} warning(s) in {checked} rule(s)" if checked or not errors
          else f"{errors} error(s): the rules did not load, so none was checked further")
    return EXIT_BAD_INPUT if errors else EXIT_OK
