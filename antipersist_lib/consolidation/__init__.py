"""Memory consolidation under the paper's construction conditions (§3, §4, Tables 2-3).

* ``pool``: the fixed trajectory pool (expert replays through the real engines, or earlier runs'
  episodes), Stream batches, and the deterministic "summarized trajectory log" text.
* ``bank``: ``MemoryBank``, the one representation every builder produces, and snapshot files.
* ``consolidator`` (the shared base, ``update(bank, batch)``) and one module per builder: ``ace`` (ACE /
  ACE_GT), ``awm``, ``cheatsheet`` (Dynamic Cheatsheet), ``clin``.
* ``episodic``: the episodic-only baselines (All, FS=N, Incr. Keep, One-Pass Keep).
* ``regimes``: ``build_memory`` under Static-All, Static-Group or Stream.
* ``method``: the ``consolidated_memory`` method that evaluates a bank (all entries in context).

Modules are imported where used, so importing the package stays cheap.
"""
