"""An OpenAI grader as an open trainer's reward: TRL, verl, verifiers and OpenRLHF, each with its own contract,
all scoring exactly as `rfteval grade` does.

    from rfteval.reward import for_trl, for_verl, for_verifiers, for_openrlhf
    reward = for_trl("graders/chipstack.json", items="datasets/chipstack/items.jsonl")  # GRPOTrainer(reward_funcs=[reward])
    compute_score = for_verl("graders/chipstack.json")  # verl: reward.custom_reward_function.path / .name

What they share: options.py (the options), items.py (the item found again exactly), core.py (the sample a completion
becomes, a rollout built as the run builds it), base.py (the grader ready to score, the error rule). One module per
trainer holds its call and registers what the export commands write for it (targets.py); export.py writes
`export-reward`'s module, export_dataset.py `export-dataset`'s files and export_environment.py `export-environment`'s
package.
Importing the package registers every built-in trainer, in the order --target lists them: a new trainer is one
module plus one name in the first import below.
"""

# isort: off
from rfteval.reward import trl, verl, verifiers, openrlhf, export_environment  # noqa: F401  (each registers)
# isort: on

from rfteval.reward.base import Reward, grader_config
from rfteval.reward.core import openai_tool_calls, sample_from_completion
from rfteval.reward.export import export_module
from rfteval.reward.items import META, ItemTable, decode_exported, plain_data
from rfteval.reward.openrlhf import OpenRLHFReward, for_openrlhf
from rfteval.reward.options import RewardOptions
from rfteval.reward.trl import TRL_EXTRAS, TRLReward, for_trl, for_trl_async
from rfteval.reward.verifiers import VerifiersReward, for_verifiers
from rfteval.reward.verl import VERL_ADDED, VerlReward, for_verl

__all__ = [
    "META", "TRL_EXTRAS", "VERL_ADDED", "ItemTable", "OpenRLHFReward", "Reward", "RewardOptions", "TRLReward",
    "VerifiersReward", "VerlReward", "decode_exported", "export_module", "for_openrlhf", "for_trl", "for_trl_async",
    "for_verifiers", "for_verl", "grader_config", "openai_tool_calls", "plain_data", "sample_from_completion",
]
