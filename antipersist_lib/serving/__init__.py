"""Talking to models through the OpenAI-compatible API: chat and embedding clients, the embedded llama.cpp default, call ledger, response cache, endpoint profiles."""
