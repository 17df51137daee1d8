"""Running experiments: the K-iteration protocol, run directories, scale-out grids, the main job, doctor, the notebook runner and the pipeline demo."""
