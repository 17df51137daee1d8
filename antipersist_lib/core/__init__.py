"""The method's parts: mode selector (KNN-UCB), synthesis, prompts, the ReAct agent loop, action parsing, and Anti-Persistence per task with its Table 3 config."""
