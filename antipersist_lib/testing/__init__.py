"""Instruments for the kit's own tests and pipeline demo: a tiny errand world and a scripted
policy served by the loopback OpenAI-compatible server. Neither is a benchmark or a model;
real experiments use the benchmark adapters and a real backbone."""
