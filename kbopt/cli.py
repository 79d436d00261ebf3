"""kbopt command line: the parser, and the dispatch to the command asked for (kbopt/commands/)."""
from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from typing import NoReturn

from kbopt import __version__
from kbopt.engine.evaluators import EVALUATORS
from kbopt.engine.pack.packs import configured_packs
from kbopt.errors import EXIT_FAILED, EXIT_OK, KboptError, RuleError, bounded
from kbopt.kb.catalog import LAYERS
from kbopt.kb.engines import ENGINES
from kbopt.output import say
from kbopt.reports import FORMATS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbopt",
        description="Explained, rule-based advice on LLM inference optimizations.",
        epilog="Exit codes: 0 done; 1 rule examples failed (rules test) or internal error; "
               "2 bad input or bad rules (the message names the JSON path or the rule file and line); "
               "130 interrupted (Ctrl-C) before anything was written.")
    parser.add_argument("--version", action="version", version=f"kbopt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    advise = commands.add_parser("advise", help="advise on a facts file",
                                 description="Run the rules on a facts file (facts/1, JSON or YAML) and print "
                                             "the strategy set with the rules and fact values behind it.")
    source = advise.add_mutually_exclusive_group()
    source.add_argument("--facts", metavar="FILE", action="append",
                        help="facts document, JSON or YAML (- for standard input); repeat it to merge several in order, "
                             "a later document's facts replacing an earlier one's (e.g. kbopt collect | kbopt advise "
                             "--facts - --facts constraints.yaml); with --collect, merged over the collected facts")
    advise.add_argument("--collect", action="store_true",
                        help="collect the facts first (takes the collect options below); --facts files are merged over them")
    source.add_argument("--facts-jsonl", metavar="FILE",
                        help="one facts document per line (- for standard input): one advice JSON per line, streamed; "
                             "a bad line gives an error record naming it and the rest go on (exit 2 at the end)")
    advise.add_argument("--jobs", type=int, default=0, metavar="N",
                        help="with --facts-jsonl: worker processes (default: one per CPU)")
    advise.add_argument("--format", choices=FORMATS, default="text",
                        help="output format (default text); html and md also show a --set what-if")
    advise.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    advise.add_argument("--emit", type=_emit_target, metavar="ENGINE[@VERSION]",
                        help=f"print the deployment after the advice as a launch script for this engine ({', '.join(ENGINES)}) "
                             "instead of the report: today's settings with the advice's changes, each line commented with "
                             "today's value and the rule that set it, checked against the engine's profile (docs/engines.md); "
                             "@VERSION names the version to write for (vllm@0.11.0; default: the deployed engine's, else the "
                             "latest covered)")
    advise.add_argument("--launch", metavar="COMMAND|@FILE",
                        help="today's launch command (e.g. \"vllm serve MODEL --tensor-parallel-size 4\"), or @FILE holding "
                             "it: its flags become serving.* facts (before --set), and --emit relaunches it flag for flag "
                             "with the advice applied; flags kbopt does not model are carried as given")
    advise.add_argument("--explain", action="store_true",
                        help="text and md: add each strategy's proof chain, the rejections (text), what waits on facts, "
                             "the estimates, facts and rules fired (default: the summary and the strategies; md then fits "
                             "an issue or a ticket); kbopt report always writes them")
    advise.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="overrides",
                        help="override a fact for a what-if, e.g. --set telemetry.memory_used_ratio=0.95 (repeatable)")
    _pack_options(advise)
    _collect_options(advise.add_argument_group("collect options (with --collect)"))

    collect = commands.add_parser("collect", help="write a facts file from NVML, /metrics endpoints and request traces",
                                  description="Collect facts v1, with each fact's provenance, from NVML (sampled), "
                                              "Prometheus exposition (dcgm-exporter, vLLM, SGLang, TGI, Triton) and "
                                              "request traces. The best-quality reading of each fact wins.")
    _collect_options(collect)
    collect.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")

    report = commands.add_parser("report", help="write the explanation report (HTML), optionally a what-if",
                                 description="Write a self-contained HTML (or Markdown) explanation report. With "
                                             "--compare or --set it also shows what changed in the facts and "
                                             "in the advice.")
    report.add_argument("--facts", required=True, action="append", metavar="FILE",
                        help="facts document, JSON or YAML (- for standard input); repeat it to merge several in order, "
                             "as advise does")
    report.add_argument("--compare", metavar="FILE", help="a second facts document to compare with")
    report.add_argument("--launch", metavar="COMMAND|@FILE",
                        help="today's launch command, as advise reads it: the report's launch table relaunches it")
    report.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="overrides",
                        help="what-if override, applied to the compared side (repeatable)")
    report.add_argument("--format", choices=("html", "md"), default="html", help="report format (default html)")
    report.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    _pack_options(report)

    fleet = commands.add_parser("fleet", help="advice for every deployment a Prometheus server sees",
                                description="Read every replica of every deployment (vLLM, SGLang, TGI, Triton, with "
                                            "dcgm-exporter's GPU series) from a Prometheus server in a fixed number of "
                                            "queries, advise each deployment and say where its replicas disagree.",
                                epilog="Exit codes: 0 done (deployments with missing metrics are listed with what is "
                                       "missing); 2 the server cannot be used (unreachable, refusing, timing out), a bad "
                                       "option, or no deployment under the selector; 130 interrupted, nothing written.")
    fleet.add_argument("--prometheus", required=True, metavar="URL", help="the server, e.g. http://prometheus:9090")
    fleet.add_argument("--window", default="30m", metavar="DURATION", help="averages and rates over this window (default 30m)")
    fleet.add_argument("--selector", metavar="'{LABEL=\"VALUE\",...}'",
                       help="label matchers added to every query, e.g. '{namespace=\"llm\"}'")
    fleet.add_argument("--timeout", type=_finite_seconds, default=10.0, metavar="S",
                       help="each query's deadline, from connecting to the last byte of its answer (default 10)")
    fleet.add_argument("--retries", type=int, default=2, metavar="N", help="retries of a failed query (default 2)")
    fleet.add_argument("-o", "--output", metavar="DIR",
                       help="write fleet.jsonl, index.html and deployments/*.html here (all or nothing); "
                            "without it, fleet.jsonl goes to standard output")
    _pack_options(fleet)

    schema = commands.add_parser("schema", help="print a JSON Schema (for editors)")
    schema.add_argument("which", choices=("facts", "rules"))

    rules = commands.add_parser("rules", help="rule authoring: list, show, lint, test, docs, new, graph")
    rule_commands = rules.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    listing = rule_commands.add_parser("list", help="list the rules, one per line")
    listing.add_argument("--layer", choices=LAYERS)
    listing.add_argument("--tag", help="only rules with this tag")
    _pack_options(listing, engine=False)
    test = rule_commands.add_parser("test", help="run every rule's inline examples (on both evaluators where durable_rules imports)")
    test.add_argument("paths", nargs="*", metavar="PATH",
                      help="rule packs to test, layered over the built-in one: their rules' examples (default: the built-in pack's)")
    test.add_argument("--all", action="store_true", dest="all_rules",
                      help="with PATHs: every rule's examples, the built-in ones too (a pack's parameters or overrides can change them)")
    _pack_options(test, engine=False)
    lint = rule_commands.add_parser("lint", help="static checks: file:line, the offending text and a hint; exit 2 on errors",
                                  description="Static checks on rule packs. Each finding has a stable code (L001, L201, ...), "
                                              "explained in docs/lint-codes.md; exit 2 when any is an error.")
    lint.add_argument("paths", nargs="*", metavar="PATH", help="rule packs to lint, layered over the built-in one")
    show = rule_commands.add_parser("show", help="one rule: condition in words, parameters, examples, source, file:line")
    show.add_argument("rule_id", metavar="RULE_ID")
    _pack_options(show, engine=False)
    docs = rule_commands.add_parser("docs", help="write one Markdown page per rule and an index")
    docs.add_argument("-o", "--output", required=True, metavar="DIR")
    _pack_options(docs, engine=False)
    new = rule_commands.add_parser("new", help="scaffold a rule file with its required parts")
    new.add_argument("layer", choices=LAYERS)
    new.add_argument("name", help="the rule id, e.g. S-CHUNKED-PREFILL (written as <dir>/<layer>/<id in lower case>.yaml)")
    new.add_argument("--dir", default=".", help="the pack directory (default: the current one)")
    graph = rule_commands.add_parser("graph", help="which rule feeds which, and the strategy conflict graph")
    graph.add_argument("--format", choices=("dot", "json"), default="dot")
    _pack_options(graph, engine=False)
    return parser


def _emit_target(text: str) -> str:
    """`--emit ENGINE[@VERSION]`: a covered engine, and a version it reports (0.11.0, v3.3.0, 1.1.0rc2)."""
    from kbopt.kb.engines import parse_version
    engine, at, version = text.partition("@")
    if engine not in ENGINES:
        raise argparse.ArgumentTypeError(f"{text!r}: the engines are {', '.join(ENGINES)} (ENGINE or ENGINE@VERSION)")
    if at and parse_version(version) is None:
        raise argparse.ArgumentTypeError(f"{text!r}: {version!r} is not a version as an engine reports it (e.g. 0.11.0)")
    return text


def _finite_seconds(text: str) -> float:
    """A number of seconds on the command line: `nan` and `inf` parse as floats, and then no wait
    or deadline compared with them ever ends (or a socket refuses them deep inside)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of seconds")
    return value


def _pack_options(parser, engine: bool = True) -> None:
    parser.add_argument("--rules", action="append", default=configured_packs(), metavar="DIR",
                        help="extra rule directory laid out as <layer>/<id>.yaml (repeatable; "
                             "KBOPT_RULES, a list of directories separated by ':', adds packs by default)")
    if engine:
        parser.add_argument("--evaluator", choices=EVALUATOR_CHOICES, default="auto",
                            help="the rule evaluator: durable_rules, or the pure-Python reference, which gives "
                                 "the same advice (auto: durable_rules where it imports)")
        parser.add_argument("--engine", choices=EVALUATOR_CHOICES, dest="evaluator", action=_OldEvaluatorSpelling,
                            help=argparse.SUPPRESS)


EVALUATOR_CHOICES = ("auto", *EVALUATORS)


class _OldEvaluatorSpelling(argparse.Action):
    """`--engine`, the evaluator option's first name: it read as the serving engine beside `--emit
    ENGINE`, so it is `--evaluator` now; the old spelling still works, with a note."""

    def __call__(self, parser, namespace, values, option_string=None):
        print("kbopt: note: --engine is now --evaluator (the serving engine is --emit's and the facts'); "
              "the old spelling will go in a later release", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _collect_options(group) -> None:
    group.add_argument("--duration", type=_finite_seconds, default=30.0, metavar="S",
                       help="NVML sampling time, and the window between two scrapes of a /metrics URL (default 30)")
    group.add_argument("--interval", type=_finite_seconds, default=0.5, metavar="S", help="NVML sampling interval (default 0.5)")
    group.add_argument("--gpu", type=int, default=0, metavar="N", help="GPU index for NVML (default 0)")
    group.add_argument("--no-nvml", action="store_true", help="do not sample NVML")
    group.add_argument("--metrics", action="append", default=[], metavar="FILE_OR_URL",
                       help="Prometheus text exposition: a file or an http(s) URL (repeatable)")
    group.add_argument("--workload", action="append", default=[], metavar="TRACE",
                       help="request trace: Azure CSV, Mooncake JSONL, BurstGPT CSV, vllm bench serve JSON, "
                            "or CSV/JSONL with --columns (repeatable)")
    group.add_argument("--trace-format", default="auto",
                       choices=("auto", "azure", "mooncake", "burstgpt", "vllm-bench", "csv", "jsonl"))
    group.add_argument("--columns", metavar="KEY=COLUMN,...",
                       help="generic traces: timestamp=, prompt=, output= (or total=), duration=")
    group.add_argument("--time-unit", choices=("s", "ms", "us"), default="s", help="generic traces' time columns (default s)")
    group.add_argument("--long-threshold", type=int, default=2048, metavar="TOKENS",
                       help="a request longer than this counts toward workload.long_seq_fraction (default 2048)")
    group.add_argument("--window", type=float, default=60.0, metavar="S",
                       help="window for the peak arrival rate (default 60)")
    group.add_argument("--model", metavar="NAME_OR_FILE", help="a model from the catalog, or a Hugging Face config.json")


def run() -> NoReturn:
    """The `kbopt` command and `python -m kbopt`: main() (which has closed every file it wrote),
    then, standard output and error flushed, an exit that skips tearing the interpreter down
    (freeing every module and object one by one, and a last garbage collection over them all:
    10-30 ms of a cold advise, for nothing the process still needs). main() itself returns, for
    callers in their own process."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):     # a reader gone (`| head`), or a stream closed
            pass
    os._exit(code)


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command's own parser, so that its usage and name head an error about its arguments."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _command_parser(chosen, args)
    return parser


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The arguments, or exit 2 with the usage of the command they were given to: argparse would
    print the top-level usage for an argument a subcommand does not take (`--set PATH VALUE`)."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        words = list(sys.argv[1:] if argv is None else argv)
        spaced = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--set" and "=" not in words[i + 1]]
        hint = (f"; --set takes PATH=VALUE as one word (--set {spaced[0]}=VALUE)" if spaced else "")
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


# command -> the module that runs it (kbopt/commands/): only the one asked for is imported, so a
# cold `advise` loads neither the collectors nor the rule-authoring tools.
COMMANDS = {"advise": "advise", "collect": "collect", "report": "report", "fleet": "fleet", "schema": "schema",
            "rules": "rules"}


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        command = importlib.import_module(f"kbopt.commands.{COMMANDS[args.command]}")
        code: int = command.run(args)
        return code
    except RuleError as error:         # the rendered diagnostic says "error[L...]" itself
        say(f"kbopt: {bounded(str(error))}", lines=True)
        return error.exit_code
    except KboptError as error:
        say(f"kbopt: error: {bounded(str(error))}")
        return error.exit_code
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        print("kbopt: interrupted; nothing was written", file=sys.stderr)
        return 130
    except Exception as error:   # a bug, not bad input: say so without a wall of traceback
        if os.environ.get("KBOPT_DEBUG"):
            raise
        say(f"kbopt: internal error: {type(error).__name__}: {bounded(str(error))} "
            "(set KBOPT_DEBUG=1 for the traceback, and please report it)")
        return EXIT_FAILED
