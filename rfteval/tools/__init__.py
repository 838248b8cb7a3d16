"""An agent's tools: what a tool call and its result are, and the tool box a run holds for its rollouts.

`base.py` holds the types every kind of tool box shares (python tools run in the sandbox now; Agent RFT's HTTP
endpoints and MCP servers later). The runner (rfteval/run/rollout.py) plays a rollout against a `ToolBox` and
never knows which kind it holds.
"""
