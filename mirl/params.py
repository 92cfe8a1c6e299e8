"""One params file for the whole pipeline: shared sections, then one section per stage.

    models:     every LLM role (policy, localizer, teacher, annotator, behavior_judge, rubric_writer,
                rubric_judge, step_judge: model, api_base, api_key_env, temperature, top_p, max_tokens,
                ...), plus cache, retries, prices and the run's budget  (`mirl.llm.config.LLMConfig`)
    sandbox:    how sandboxes are made                                  (`mirl.sandbox.base.SandboxConfig`)
    agent:      action format, step and time limits                     (`mirl.agent.config.AgentConfig`)
    profiling:  stage 01's own settings                                 (`mirl.profiling.params.ProfilingParams`)
    taxonomy:   stage 02's own settings                                 (`mirl.taxonomy.params.TaxonomyParams`)
    prefixes:   stage 03's own settings                                 (`mirl.prefixes.params.PrefixParams`)
    step_profiling: PivotRL's preprocessing before stage 04             (`mirl.training.params.StepProfilingParams`)
    training:   stage 04's own settings                                 (`mirl.training.params.TrainingParams`)
    misbehavior_rate: stage 05's own settings                           (`mirl.evaluate.params.MisbehaviorRateParams`)
    pass_at_k:  stage 06's own settings                                 (`mirl.evaluate.params.PassAtKParams`)
    cost:       stage 07's own settings: runs, cut, prices              (`mirl.cost.params.CostParams`)

`mirl run` and `mirl rollout` read the same file. Overrides name their section:
`-p profiling.max_tasks=3`, `-p models.policy.temperature=1.0`. An unknown section or key, a wrong
type, or a budget for a stage that does not exist is an error naming it (and the file).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mirl.agent.config import AgentConfig
from mirl.cost.params import CostParams
from mirl.evaluate.params import MisbehaviorRateParams, PassAtKParams
from mirl.llm.config import LLMConfig
from mirl.prefixes.params import PrefixParams
from mirl.profiling.params import ProfilingParams
from mirl.sandbox.base import SandboxConfig
from mirl.taxonomy.params import TaxonomyParams
from mirl.training.params import StepProfilingParams, TrainingParams
from mirl.typed import ParamsError, build, read_yaml

SHARED = ("models", "sandbox", "agent")


@dataclass
class Params:
    """Everything a run is made from; each stage reads the shared sections and its own."""

    models: LLMConfig = field(default_factory=LLMConfig, metadata={"help": "LLM roles, cache, retries, prices, budget"})
    sandbox: SandboxConfig = field(default_factory=SandboxConfig, metadata={"help": "how sandboxes are made"})
    agent: AgentConfig = field(default_factory=AgentConfig, metadata={"help": "the agent loop's format and limits"})
    profiling: ProfilingParams = field(default_factory=ProfilingParams, metadata={"help": "stage 01: error profiling"})
    taxonomy: TaxonomyParams = field(default_factory=TaxonomyParams, metadata={"help": "stage 02: error taxonomy"})
    prefixes: PrefixParams = field(default_factory=PrefixParams, metadata={"help": "stage 03: misbehavior prefixes"})
    step_profiling: StepProfilingParams = field(default_factory=StepProfilingParams, metadata={
        "help": "PivotRL's preprocessing: actions sampled at reference steps, pivots kept"})
    training: TrainingParams = field(default_factory=TrainingParams, metadata={"help": "stage 04: RL from misbehavior prefixes"})
    misbehavior_rate: MisbehaviorRateParams = field(default_factory=MisbehaviorRateParams, metadata={
        "help": "stage 05: misbehavior rates on held-out prefixes"})
    pass_at_k: PassAtKParams = field(default_factory=PassAtKParams, metadata={"help": "stage 06: benchmark scores and pass@k"})
    cost: CostParams = field(default_factory=CostParams, metadata={"help": "stage 07: cost and resource accounting"})


def sections() -> list[str]:
    return [f.name for f in dataclasses.fields(Params)]


def stage_sections() -> list[str]:
    return [s for s in sections() if s not in SHARED]


def section_class(name: str) -> type:
    for f in dataclasses.fields(Params):
        if f.name == name:
            return f.default_factory  # type: ignore[return-value]
    raise ParamsError(f"no params section {name!r}; sections: {', '.join(sections())}")


# --- overrides -------------------------------------------------------------------------------------


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`SECTION.KEY=VALUE` pairs (VALUE read as YAML, so numbers, booleans and lists keep their type)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ParamsError(f"override {pair!r} must look like SECTION.KEY=VALUE")
        try:
            out[key] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key] = value
    return out


def apply_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set each dotted key in a nested mapping (a copy); a key without its section is an error."""
    import copy

    values = copy.deepcopy(values)
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if len(parts) < 2 or parts[0] not in sections():
            hint = next((f"{s}.{dotted}" for s in stage_sections() + list(SHARED)
                         if parts[0] in {f.name for f in dataclasses.fields(section_class(s))}), None)
            raise ParamsError(f"override {dotted!r} must name its section (one of {', '.join(sections())})"
                              + (f", e.g. {hint}" if hint else ""))
        node = values
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:  # an empty section header in the file
                node[part] = {}
            nxt = node[part]
            if not isinstance(nxt, dict):
                raise ParamsError(f"override {dotted!r}: {'.'.join(parts[:i + 1])} is not a section")
            node = nxt
        node[parts[-1]] = value
    return values


# --- loading ---------------------------------------------------------------------------------------


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, mappings merged key by key, anything else replaced."""
    out = dict(base)
    for k, v in over.items():
        if v is None and isinstance(out.get(k), dict):
            continue  # a section header whose keys are all commented out: nothing to change
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_file(path: str | Path | None, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The raw sections of a params YAML (empty without a file); not yet validated.

    A file may start from another: `base: ../paper.yaml` (relative to the file) is read first and
    this file's sections are merged over it, key by key (how the training recipes share the paper's
    settings and change only what differs)."""
    if path is None or str(path) == "":
        return {}
    path = Path(path)
    data = read_yaml(path)
    if data is None:  # an empty file is more likely a truncated copy than a wish for every default
        raise ParamsError(f"{path}: empty (no sections); to run the defaults, name no params file")
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: must be a mapping of section names ({', '.join(sections())}) to settings")
    data.pop("recipes", None)  # not a section: the training recipes the file lists (`mirl.recipes`)
    base = data.pop("base", None)
    if base is not None:
        where = base_file(path, base)
        if where in _seen or where == path.resolve():
            raise ParamsError(f"{path}: base {base!r} leads back to itself")
        data = merge(read_file(where, (*_seen, path.resolve())), data)
    return data


def base_file(path: Path, base: Any) -> Path:
    """The params file that `path`'s `base:` names (relative to `path`), checked to exist: an error
    names the file that says `base:`, not only the one it could not find."""
    if not isinstance(base, str) or not base:
        raise ParamsError(f"{path}: base must be the path of another params file, got {base!r}")
    where = (path.parent / base).resolve()
    if not where.exists():
        raise ParamsError(f"{path}: base {base!r}: no such params file ({where})")
    return where


def from_values(values: dict[str, Any], source: str = "params") -> Params:
    """Validate nested section values into `Params`; errors name the source and the dotted key."""
    unknown = sorted(set(values) - set(sections()))
    if unknown:
        raise ParamsError(f"{source}: unknown section(s) {', '.join(map(str, unknown))}; "
                          f"sections: {', '.join(sections())}")
    for name, section in values.items():
        if section is not None and not isinstance(section, dict):
            raise ParamsError(f"{source}: section {name!r} must be a mapping, got {type(section).__name__}")
    values = {k: (v or {}) for k, v in values.items()}
    try:
        params = build(Params, values)
    except ParamsError as e:
        raise ParamsError(f"{source}: {e}") from None
    bad = sorted(set(params.models.stage_budget_usd) - set(stage_sections()))
    if bad:
        raise ParamsError(f"{source}: models.stage_budget_usd names no stage: {', '.join(bad)}; "
                          f"stages: {', '.join(stage_sections())}")
    return params


def load(path: str | Path | None = None, overrides: dict[str, Any] | list[str] | None = None) -> Params:
    """The pipeline's params from a YAML file (optional) and `SECTION.KEY` overrides."""
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    values = apply_overrides(read_file(path), overrides or {})
    source = str(path) if path else "params"
    return from_values(values, source)


def make(**sections_values: dict[str, Any]) -> Params:
    """`Params` from keyword sections, e.g. `make(profiling={"seeds": 1}, agent={"max_steps": 3})`."""
    return from_values(dict(sections_values))


def to_dict(params: Params) -> dict[str, Any]:
    return dataclasses.asdict(params)
