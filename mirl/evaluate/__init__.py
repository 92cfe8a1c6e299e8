"""The evaluation stages: misbehavior rates on held-out prefixes (`rate_stage`) and benchmark scores
with pass@k (`passk_stage`), for the policies `policies` names, with their params (`config`) and the
notebooks' tables and figures (`report`). The statistics themselves are `mirl.evaluation`'s."""
