"""Reading results: run loading, figures, the paper's numbers, statistics, ablation maps, provenance audit, decision audits, the Appendix C walkthrough."""
