"""The stores: trajectory memory M_k, outcome log L_k, abstraction store S_k (baselines), cosine similarity."""
