"""The embedded tiny recipe: the 3.3M-parameter selector `make train` builds, pretrains and trains on a 2-core CPU.

Nothing here is needed to train or serve any other model, and no part of the system imports it: a tiny model folder
names its hooks by dotted path in its `genselect_model.json` (`model.FOLDER_HOOKS`; the `tiny` kind's defaults in
driver/models/hooks.py name the same), which the system loads by name:

* a response form (actors/rollout/response_forms.py's `ResponseForm`): forms.py's `response_form` picks pick-then-point
  (pick_point.py, its pick credited by `tiny.pick_reward`: pick_reward.py) or solve-then-point (solve_point.py) for
  a tiny model folder; every other model samples free text;
* parameters a model folder declares frozen (core/frozen.py): the hand-written induction circuit's entries
  (induction.py, `model.frozen_entries`) get no gradient in the learner;
* extra training sequences a step (driver/train.py, stage 3b): the anchor rows of anchor_rows.py (`extra_rows`);
* the kind's `build` (model.py) and `prepare` (preparation.py: pretraining, then the warm-start), and the problems a
  pretrained model saw (`pretrain.problems_seen`, for `driver.bon --exclude`).

The rest builds the model: model.py (tokenizer and Qwen3 initialisation), induction.py (the circuit), pretrain.py
(label-free pretraining on worked solutions), warmstart.py and pick_point_start.py (the warm-starts before RL),
selection_rows.py and greedy.py (their rows), chat.py (the model's chat templates). Its config keys are one section,
`tiny:` (config.py, its rules in config_rules.py), which the system names by dotted path only
(core/recipe_sections.py) and `python -m driver.train --help` lists after its own keys.
"""
