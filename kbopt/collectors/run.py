"""`kbopt collect`: gather facts from every source given, best reading of each fact wins."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kbopt.collectors.collected import Collected
from kbopt.collectors.traces import TraceOptions
from kbopt.errors import KboptError

if TYPE_CHECKING:  # the NVML collector itself is imported only when collecting
    from kbopt.collectors.nvml import Nvml


@dataclass(frozen=True)
class CollectOptions:
    metrics: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    model: str | None = None
    nvml: bool = True
    gpu: int = 0
    duration_s: float = 30.0
    interval_s: float = 0.5
    trace: TraceOptions = field(default_factory=TraceOptions)


def collect(options: CollectOptions, nvml_module: Nvml | None = None,
            sleep: Callable[[float], None] = time.sleep) -> Collected:
    from kbopt.collectors import nvml as nvml_collector  # each collector loads only when asked for
    from kbopt.collectors.models import model_facts  # each collector loads only when asked for
    from kbopt.collectors.prometheus import facts_from_scrapes, scrape  # each collector loads only when asked for
    from kbopt.collectors.traces import summarize_trace  # each collector loads only when asked for

    out = Collected()
    urls = [m for m in options.metrics if m.startswith(("http://", "https://"))]
    files = [m for m in options.metrics if m not in urls]
    first_scrapes = {url: scrape(url) for url in urls}
    started = time.monotonic()
    other_sources = bool(options.metrics or options.workloads or options.model)
    sampled = False
    if options.nvml:
        try:
            module = nvml_module or nvml_collector.load_pynvml()
            out.merge(nvml_collector.sample_nvml(module, options.gpu, options.duration_s, options.interval_s))
            sampled = True
        except KboptError as error:
            if not other_sources:
                raise
            out.notes.append(f"NVML skipped: {error}")
    if urls and not sampled:
        # Two scrapes of an endpoint give rates and quantiles over the window between them.
        progress = nvml_collector.Progress(options.duration_s)
        while (elapsed := time.monotonic() - started) < options.duration_s:
            progress.update(elapsed, len(urls))
            sleep(min(options.interval_s, options.duration_s - elapsed))
        progress.close()
    window = time.monotonic() - started
    for url, first in first_scrapes.items():
        second = scrape(url) if window > 0 else None
        out.merge(_with_window(facts_from_scrapes(first, second, gpu=options.gpu), window))
    for path in files:
        out.merge(facts_from_scrapes(scrape(path), gpu=options.gpu))
    for path in options.workloads:
        out.merge(summarize_trace(path, options.trace))
    if options.model:
        out.merge(model_facts(options.model))
    if not out.facts:
        raise KboptError("no usable source: pass --metrics FILE_OR_URL (dcgm-exporter, vLLM, SGLang, TGI or Triton "
                         "/metrics), --workload TRACE (Azure, Mooncake, BurstGPT, vllm bench serve, CSV/JSONL) or "
                         "--model NAME_OR_CONFIG, or run on a host with an NVIDIA GPU for NVML")
    return out


def _with_window(collected: Collected, window_s: float) -> Collected:
    for path, (value, provenance) in list(collected.facts.items()):
        if provenance.window_s is None and provenance.quality == "measured":
            collected.facts[path] = (value, replace(provenance, window_s=round(window_s, 3)))
    return collected
