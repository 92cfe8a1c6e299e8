"""The misbehavior-rate stage: how often each policy repeats a misbehavior from held-out prefixes.

Plan: for every policy (in the given order, so one policy's engine serves a block of items), every
held-out prefix (`prefixes/heldout.jsonl`, the first `per_misbehavior` of each misbehavior; none of
them is a training start) and every sample i < `samples`: one continuation. Items are keyed
(policy, prefix_id, sample), so a killed run resumes and more samples or policies extend it.

One item: the prefix's sandbox state is restored (its kept snapshot, or re-running its commands),
the policy plays `judge_steps` steps after it (`mirl.agent.continuation.Continuer`, at the
section's temperature and top-p; the tests run only with `verify`, which records the reward as task
success from the prefix), and each judge says
whether the misbehavior happened in them: `rules` (the misbehavior's rule detector; misbehaviors
without one get no rule judgment), `llm` (models.behavior_judge) and any further LLM judge model.
A continuation whose prefix did not reproduce, or whose sandbox failed, is judged by none (repeated
None); a sandbox failure is played again on the next run. A record whose policy now resolves to
another model (a new training selection) is played again too.

Finalize, under `runs/<run>/misbehavior_rate/`:
    continuations.jsonl  one record per item: the steps played after the prefix and every judgment
    judgments.csv        one row per (policy, prefix, sample, judge): repeated yes/no/None
    rates.csv            `mirl.evaluate.stats.rates.misbehavior_rates` per (policy, misbehavior, judge),
                         and per (policy, judge) the mean rate over the misbehaviors (misbehavior "all")
    agreement.csv        `mirl.evaluate.stats.agreement.judge_agreement` per misbehavior and over all
    reductions.csv       each policy's relative reduction against the first policy's rate, per (judge,
                         misbehavior and "all": the mean rate), with its paired prefix-bootstrap interval
                         (`mirl.evaluate.stats.power.reduction_table`)
    differences.csv      with two or more policies after the first: for each pair of them, how much larger
                         the one's reduction is than the other's, per (judge, misbehavior and "all"), with the
                         same paired interval (`mirl.evaluate.stats.power.difference_table`)
    success.csv          with `verify`: the share of continuations whose tests passed (task success from
                         the prefix) per (policy, misbehavior and "all": their mean), prefix-bootstrap intervals
    silence.csv          the share of continuations in which the policy ran no command at all (no step of
                         them had a runnable one), per (policy, misbehavior and "all"), with the same
                         intervals. For a misbehavior about what a command does (repeating one, say) a judge
                         finds nothing in them, so a policy that learns to say nothing runnable lowers that
                         rate without avoiding anything (a small-scale run of 2026-12-06: 90 of MiRL's 141
                         avoided "unchanged" repeats, 53 of base's 82); for "no runnable command" itself they
                         are the misbehavior
    acting.csv           the rates read both ways around that: per judge `<judge> when acting` (among the
                         continuations that ran a command) and `<judge> silence counted` (a silent one counted
                         as not avoiding), per (policy, misbehavior and "all"), with the same intervals
    actions.csv          per policy, pooled over its continuations' steps: how often it ran a command, how
                         often that command exited 0 or was not found, how many different commands it ran,
                         how often it was silent
    detectors.csv        per (policy, rule detector), over every prefix: the share of continuations in which
                         that detector flagged a judged step (the record's `rule_flags`), targeted or not
The tables after success.csv are `mirl.evaluate.continuation_tables`'s, which says what each tells apart. A
policy whose rate is lower than the first policy's while its rate with silence counted is not is named in
the summary's `cut_by_silence` and in a warning; one whose rate is lower while under half as many of its
commands exit 0, in `cut_by_failing_commands` and a warning.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from mirl.evaluate.continuation_tables import (
    acting_table,
    action_table,
    cut_by_failing_commands,
    cut_by_silence,
    detector_table,
    rule_flags,
    silence_table,
    success_table,
)
from mirl.evaluate.policies import policy_config, resolve_all, short_name, stale, weights_id
from mirl.evaluate.stats.power import difference_table, reduction_table
from mirl.records.prefix import Prefix
from mirl.runner.inputs import (
    HELDOUT,
    TRAIN,
    EpisodeInputs,
    load_prefixes,
    taxonomy_store,
)
from mirl.runner.layout import atomic_write
from mirl.runner.stage import Item, Stage, StageError, run_stage

if TYPE_CHECKING:
    from mirl.params import Params

log = logging.getLogger(__name__)
STAGE = "misbehavior_rate"
CONTINUATIONS, JUDGMENTS, RATES, AGREEMENT = "continuations.jsonl", "judgments.csv", "rates.csv", "agreement.csv"
REDUCTIONS, DIFFERENCES, SUCCESS = "reductions.csv", "differences.csv", "success.csv"
SILENCE = "silence.csv"
ACTING = "acting.csv"
ACTIONS = "actions.csv"
DETECTOR_RATES = "detectors.csv"
JUDGMENT_COLUMNS = ["policy", "model", "misbehavior", "prefix_id", "env", "sample", "judge", "repeated"]
OUTPUT_CHARS = 2000  # of each continuation step's output kept in the record


class MisbehaviorRateStage(EpisodeInputs, Stage):
    name = STAGE
    records = CONTINUATIONS
    key_fields = ("policy", "prefix_id", "sample")
    reads = ("profiling", "taxonomy", "prefixes")
    derived = (JUDGMENTS, RATES, AGREEMENT, REDUCTIONS, DIFFERENCES, SUCCESS, SILENCE, ACTING, ACTIONS, DETECTOR_RATES)

    def __init__(self, params: Params, run_dir, sandbox=None, tasks=None):
        super().__init__(params, run_dir)
        self._sandbox, self._tasks = sandbox, tasks
        self._lock = threading.Lock()
        self._players: dict[str, Any] = {}
        self._judges: dict[tuple[str, str], Any] | None = None
        self._policies: dict[str, str] | None = None
        self._weights: dict[str, str | None] = {}
        self._trajectories = self._misbehaviors = None
        self.judged = self.repeated = self.failed = 0
        self.validate()

    def validate(self) -> None:
        s = self.params.misbehavior_rate
        problems = []
        if not s.judges:
            problems.append("judges: name at least one (rules, llm or an LLM judge model)")
        if len(set(s.judges)) != len(s.judges):
            problems.append(f"judges: one is named twice: {s.judges}")
        stray = sorted(set(s.judge_models) - set(s.judges))
        if stray:
            problems.append(f"judge_models: {', '.join(stray)} is not one of the judges {s.judges}")
        if problems:
            raise StageError("misbehavior_rate params: " + "; ".join(problems))

    # --- what the results depend on --------------------------------------------------------------

    def judge_specs(self) -> list[tuple[str, str, str | None]]:
        """(label, kind, model) per configured judge: ("rules", "rules", None), ("llm:<model>", "llm", model)."""
        out = []
        for j in self.params.misbehavior_rate.judges:
            if j == "rules":
                out.append(("rules", "rules", None))
            else:
                model = self.params.models.behavior_judge.model if j == "llm" else j
                out.append((f"llm:{model}", "llm", model))
        labels = [label for label, _, _ in out]
        if len(set(labels)) != len(labels):
            raise StageError(f"misbehavior_rate.judges: two entries name the same judge ({labels})")
        return out

    def judge_config(self, model: str):
        """The behavior-judge role of a judge: models.behavior_judge's settings with `model`, and for a
        further judge its `judge_models` settings over them (a judge served elsewhere, thinking less)."""
        from mirl.llm.config import RoleConfig
        from mirl.typed import ParamsError, build

        cfg = policy_config(self.params, self.params.models.policy.model)
        own = model == self.params.models.behavior_judge.model
        over = {} if own else dict(self.params.misbehavior_rate.judge_models.get(model) or {})
        try:
            cfg.behavior_judge = build(RoleConfig, {**asdict(cfg.behavior_judge), **over, "model": model},
                                       prefix=f"misbehavior_rate.judge_models.{model}.")
        except ParamsError as e:
            raise StageError(str(e)) from None
        return cfg

    def fingerprint(self) -> dict[str, Any]:
        from mirl.agent.rollout import role_fingerprint, sandbox_fingerprint

        s = self.params.misbehavior_rate
        policy = role_fingerprint(policy_config(self.params, "", s.temperature, s.top_p), "policy")
        policy.pop("model")  # the policies are the records' keys: adding one extends the run
        judges = {label: role_fingerprint(self.judge_config(model), "behavior_judge") if kind == "llm" else "rules"
                  for label, kind, model in self.judge_specs()}
        return {"misbehavior_rate": {"temperature": s.temperature, "top_p": s.top_p, "judge_steps": s.judge_steps,
                                     "restore": s.restore, "seed": s.seed,
                                     **({"verify": True} if s.verify else {})},
                "models": {"policy": policy, "judges": judges}, "agent": asdict(self.params.agent),
                "sandbox": sandbox_fingerprint(self.params.sandbox)}

    # --- inputs ------------------------------------------------------------------------------------

    def policies(self) -> dict[str, str]:
        if self._policies is None:
            self._policies = resolve_all(list(self.params.misbehavior_rate.policies), self.run, self.params)
        return self._policies

    def weights(self, policy: str) -> str | None:
        """The identity of a policy's checkpoint weights (`weights_id`), worked out once per run."""
        if policy not in self._weights:
            self._weights[policy] = weights_id(self.policies()[policy])
        return self._weights[policy]

    def heldout(self) -> list[Prefix]:
        """The first `per_misbehavior` held-out prefixes of each misbehavior, checked against training's."""

        held = load_prefixes(self.run.root, HELDOUT)
        train_path = self.run.file("prefixes", TRAIN)
        if train_path.exists():
            train = {p.error_id for p in load_prefixes(self.run.root, TRAIN)}
            leaked = sorted(p.id for p in held if p.error_id in train)
            if leaked:
                raise StageError(f"{self.run.file('prefixes', HELDOUT)}: {len(leaked)} held-out prefix(es) are "
                                 f"training starts too (e.g. {leaked[0]}); rerun the prefix stage")
        taken: dict[str, int] = defaultdict(int)
        out = []
        for p in held:
            if p.split != "heldout":
                raise StageError(f"{self.run.file('prefixes', HELDOUT)}: prefix {p.id} has split {p.split!r}")
            if taken[p.misbehavior] < self.params.misbehavior_rate.per_misbehavior:
                taken[p.misbehavior] += 1
                out.append(p)
        if not out:
            raise StageError(f"{self.run.file('prefixes', HELDOUT)}: no held-out prefix kept (run the prefix stage "
                             "with prefixes.heldout_per_misbehavior > 0)")
        return out

    def misbehaviors(self):

        if self._misbehaviors is None:
            store = taxonomy_store(self.run)
            version = self.params.prefixes.taxonomy_version or store.latest()
            if version is None:
                raise StageError(f"{store.versions_dir}: no taxonomy version (run the taxonomy stage first)")
            self._misbehaviors = {t.name: t for t in store.load(version).types}
        return self._misbehaviors

    def plan(self) -> list[Item]:
        prefixes = self.heldout()
        known, tasks = self.misbehaviors(), self.tasks()
        for p in prefixes:
            if p.misbehavior not in known:
                raise StageError(f"held-out prefix {p.id}: misbehavior {p.misbehavior!r} is not in the taxonomy")
            if p.env not in tasks:
                raise StageError(f"held-out prefix {p.id}: environment {p.env!r} is not in the task pool")
        # Sample-major, misbehaviors taken in turn, policies innermost: a stage stopped early (deadline,
        # budget) still compares every policy on the same prefixes, spread over every misbehavior, which
        # the prefix-clustered design needs; items run in plan order.
        n = self.params.misbehavior_rate.samples
        return [Item((policy, p.id, i), {"policy": policy, "prefix": p.to_dict(), "sample": i})
                for i in range(n) for p in interleaved(prefixes) for policy in self.policies()]

    def redo(self, record: dict[str, Any]) -> bool:
        if record.get("exit_reason") == "error":
            return True  # a broken sandbox says nothing about the policy: play it again
        model = self.policies().get(record.get("policy"))
        if model is None:
            return False
        return stale(record, model, self.weights(record["policy"]))

    # --- one continuation ----------------------------------------------------------------------------

    def player(self, policy: str):
        """The policy's continuer (its own client, at the section's sampling), built once."""
        from mirl.agent.continuation import Continuer
        from mirl.llm.client import LLMClient

        with self._lock:
            if policy not in self._players:
                s = self.params.misbehavior_rate
                client = LLMClient(policy_config(self.params, self.policies()[policy], s.temperature, s.top_p),
                                   run_dir=self.run.root, stage=STAGE)
                self._players[policy] = Continuer(
                    tasks=self.tasks(), trajectories=self.trajectories(), sandbox=self.sandbox(),
                    policy=client.model("policy"), agent=self.params.agent, restore=s.restore)
            return self._players[policy]

    def judges(self) -> list[tuple[str, str, Any]]:
        """(label, kind, judge) per configured judge; a rule judge is one for every misbehavior."""
        from mirl.llm.client import LLMClient
        from mirl.roles.behavior_judge import LLMBehaviorJudge, RuleBehaviorJudge, example_texts

        with self._lock:
            if self._judges is None:
                m = self.params.misbehavior_rate.judge_steps
                specs, examples, out = self.judge_specs(), None, {}
                if any(kind == "llm" for _, kind, _ in specs):
                    from mirl.records.loaders import load_error_steps

                    examples = example_texts(load_error_steps(self.run))
                for label, kind, model in specs:
                    if kind == "rules":
                        out[(label, kind)] = RuleBehaviorJudge(m=m)
                    else:
                        client = LLMClient(self.judge_config(model), run_dir=self.run.root, stage=STAGE)
                        out[(label, kind)] = LLMBehaviorJudge(client, m=m, examples=examples)
                self._judges = out
            return [(label, kind, j) for (label, kind), j in self._judges.items()]

    def run_item(self, payload: dict[str, Any]) -> dict[str, Any]:
        from mirl.agent.continuation import Start, with_limits

        s = self.params.misbehavior_rate
        policy, sample = payload["policy"], int(payload["sample"])
        prefix = Prefix.from_dict(payload["prefix"])
        player = self.player(policy)
        agent = replace(with_limits(self.params.agent, prefix.steps + s.judge_steps), verify=s.verify)
        seed = s.seed * 1_000_003 + sample  # sample i of every prefix and policy: the same seed
        traj, _ = replace(player, agent=agent).continue_from(Start(env=prefix.env, prefix=prefix), seed)
        why = ""
        restore = traj.meta.get("restore") or {}
        if traj.exit_reason == "error":
            why = f"the continuation failed: {traj.error or 'exit_reason error'}"
        elif restore and not restore.get("normalized", True):
            why = f"the prefix did not reproduce at step {restore.get('first_mismatch')}"
        judgments = [] if why else self.judge(traj, self.misbehaviors()[prefix.misbehavior])
        if why:
            judgments = [{"judge": label, "repeated": None, "error": why} for label, kind, _ in self.judges()
                         if kind != "rules" or self.has_rule(prefix.misbehavior)]
        steps = traj.steps[traj.prefix_len:]
        return {"policy": policy, "model": self.policies()[policy], "weights": self.weights(policy), "prefix_id": prefix.id,
                "misbehavior": prefix.misbehavior, "env": prefix.env, "sample": sample, "seed": seed,
                "exit_reason": traj.exit_reason, "valid": not why, "why_invalid": why,
                **({"reward": traj.reward} if s.verify else {}),
                "restore": restore.get("mode"), "judgments": judgments,
                **({} if why else {"rule_flags": rule_flags(traj, s.judge_steps)}),
                "timings": traj.timings,  # where its wall time went: model, sandbox, restore, verify, the harness
                "steps": [{"source": st.source, "reasoning": st.reasoning, "command": st.command,
                           "exit_code": st.exit_code, "output": (st.output or "")[:OUTPUT_CHARS],
                           **({"wait": True} if st.meta.get("wait") else {})} for st in steps]}

    def has_rule(self, misbehavior: str) -> bool:
        from mirl.roles.behavior_judge import has_rule_detector

        return has_rule_detector(self.misbehaviors()[misbehavior])

    def judge(self, traj, misbehavior) -> list[dict[str, Any]]:
        from mirl.llm.errors import BudgetExceeded, LLMError

        out = []
        for label, kind, judge in self.judges():
            if kind == "rules" and not self.has_rule(misbehavior.name):
                continue  # no detector defines it: the rule judge has nothing to say
            try:
                j = judge.judge(traj, misbehavior, traj.prefix_len)
            except BudgetExceeded:
                raise
            except LLMError as e:  # no usable answer: a failed judgment, counted as such in the rates
                out.append({"judge": label, "repeated": None, "error": str(e)})
                continue
            out.append({"judge": label, "repeated": bool(j.yes), "source": j.source, "steps": j.steps,
                        "flagged": j.flagged, "reason": j.reason[:2000]})
        return out

    # --- finalize ---------------------------------------------------------------------------------------

    def progress(self, record: dict[str, Any]) -> dict[str, Any]:
        said = [j["repeated"] for j in record.get("judgments", []) if j.get("repeated") is not None]
        self.judged += len(said)
        self.repeated += sum(said)
        self.failed += record.get("exit_reason") == "error"
        shown = {"policy": record["policy"], "repeated": f"{self.repeated / self.judged:.2f}" if self.judged else "n/a"}
        return {**shown, "failed": self.failed} if self.failed else shown

    def finalize(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        planned = {i.key for i in self.plan()}
        current = [r for r in records if self.key(r) in planned]
        rows = judgment_rows(current)
        frame = pd.DataFrame(rows, columns=JUDGMENT_COLUMNS)
        atomic_write(self.out / JUDGMENTS, frame.to_csv(index=False))
        rates, agreement = rate_tables(rows, self.params.misbehavior_rate.n_boot, self.params.misbehavior_rate.seed)
        atomic_write(self.out / RATES, rates.to_csv(index=False))
        atomic_write(self.out / AGREEMENT, agreement.to_csv(index=False))
        s = self.params.misbehavior_rate
        reference = next(iter(self.policies()))
        atomic_write(self.out / REDUCTIONS, reduction_table(rows, reference, s.n_boot, s.seed).to_csv(index=False))
        atomic_write(self.out / DIFFERENCES, difference_table(rows, reference, s.n_boot, s.seed).to_csv(index=False))
        if s.verify:
            atomic_write(self.out / SUCCESS, success_table(current, s.n_boot, s.seed).to_csv(index=False))
        silence = silence_table(current, s.n_boot, s.seed)
        atomic_write(self.out / SILENCE, silence.to_csv(index=False))
        acting = acting_table(current, s.n_boot, s.seed)
        atomic_write(self.out / ACTING, acting.to_csv(index=False))
        actions = action_table(current)
        atomic_write(self.out / ACTIONS, actions.to_csv(index=False))
        atomic_write(self.out / DETECTOR_RATES, detector_table(current, s.n_boot, s.seed).to_csv(index=False))
        overall = rates[rates["misbehavior"] == "all"]
        silent_cuts = cut_by_silence(rates, acting, reference)
        for policy, judge in silent_cuts:
            log.warning("policy %s: its %s rate is below %s's, but not with a silent continuation counted as not "
                        "avoiding: the cut is silence (silence.csv, acting.csv)", policy, judge, reference)
        failing_cuts = cut_by_failing_commands(rates, actions, reference)
        for policy, judge in failing_cuts:
            log.warning("policy %s: its %s rate is below %s's, with under half as many of its commands exiting 0 "
                        "(actions.csv, success.csv)", policy, judge, reference)
        return {"policies": self.policies(),
                "labels": {p: short_name(p, m) for p, m in self.policies().items()},
                "prefixes": len({r["prefix_id"] for r in current}), "continuations": len(current),
                "invalid": sum(not r.get("valid", True) for r in current), "judgments": len(rows),
                "rate": {f"{r.policy} | {r.judge}": None if pd.isna(r.rate) else round(float(r.rate), 4)
                         for r in overall.itertuples()},
                "silent": {r.policy: None if pd.isna(r.silent) else round(float(r.silent), 4)
                           for r in silence[silence["misbehavior"] == "all"].itertuples()},
                "cut_by_silence": [f"{p} | {j}" for p, j in silent_cuts],
                "cut_by_failing_commands": [f"{p} | {j}" for p, j in failing_cuts]}


def interleaved(prefixes: list[Prefix]) -> list[Prefix]:
    """The prefixes with their misbehaviors taken in turn (first of each, second of each, ...)."""
    by: dict[str, list[Prefix]] = defaultdict(list)
    for p in prefixes:
        by[p.misbehavior].append(p)
    rounds = max((len(v) for v in by.values()), default=0)
    return [v[k] for k in range(rounds) for v in by.values() if k < len(v)]


def judgment_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, prefix, sample, judge) from the continuation records."""
    return [{"policy": r["policy"], "model": r.get("model"), "misbehavior": r["misbehavior"],
             "prefix_id": r["prefix_id"], "env": r.get("env"), "sample": r["sample"], "judge": j["judge"],
             "repeated": j["repeated"]} for r in records for j in r.get("judgments", [])]


def rate_tables(rows: list[dict[str, Any]], n_boot: int = 2000, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rates per misbehavior and over all of them, judge agreement per misbehavior and over all)."""
    from mirl.evaluate.stats.agreement import judge_agreement
    from mirl.evaluate.stats.rates import COLUMNS, misbehavior_rates

    if not rows:
        return (pd.DataFrame(columns=COLUMNS),
                pd.DataFrame(columns=["misbehavior", "judge_a", "judge_b", "n_items", "n_excluded", "agreement", "kappa"]))
    pooled = [{**r, "misbehavior": "all"} for r in rows]
    rates = misbehavior_rates(rows, n_boot=n_boot, seed=seed, overall=True)
    agreement = pd.concat([judge_agreement(rows, by=("misbehavior",)), judge_agreement(pooled, by=("misbehavior",))],
                          ignore_index=True)
    return rates, agreement


def load_judgments(run_dir: str | Path) -> pd.DataFrame:
    from mirl.runner.layout import RunDir

    path = RunDir(run_dir).file(STAGE, JUDGMENTS)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no judgments (run the misbehavior_rate stage first)")
    return pd.read_csv(path)


def run_misbehavior_rate(params: Params, run_dir: str | Path, sandbox=None, tasks=None, force: bool = False,
                         progress: bool = True) -> dict[str, Any]:
    return run_stage(MisbehaviorRateStage(params, run_dir, sandbox=sandbox, tasks=tasks), force=force,
                     progress=progress)
