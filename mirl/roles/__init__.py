"""The roles that judge, correct and label an agent's steps, each with its prompts and JSON schema,
online (an LLM through `mirl.llm.client`) and offline variants side by side:

- `localizer`: judge one proposed step from what the agent saw (rule detectors | LLM | both);
- `teacher`: write a corrected step from the same prefix (reference-solution replay | LLM);
- `reference_teacher`: the offline teacher's replay of a task's `solution/solve.sh`;
- `prompts`: the localizer's and teacher's prompts, in our words, with the paper's inputs and outputs;
- `annotator`, `annotator_offline`: propose, refine and label error types (LLM), or cluster them offline;
- `behavior_judge`: did the rollout repeat the misbehavior in its first m steps (LLM, or its rule detector);
- `rubric_writer`, `rubric_judge`: the RaR+ baseline's weighted rubrics and 1-10 ratings (LLM, or from
  the reference solution and the items' regex checks);
- `step_judge`: PivotRL's step equivalence (LLM, or a difflib ratio of the commands);
- `tagreply`: asking a role for a reply that ends in a tag, re-asked when the tag is missing.
"""
