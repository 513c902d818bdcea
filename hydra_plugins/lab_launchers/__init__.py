"""lab's submitit launchers (hydra/launcher=submitit_local, slurm): hydra-submitit-launcher's, each job with its
own resources (_submitit). Hydra registers the plugins it finds here; without hydra-submitit-launcher (the
`slurm` extra) there is nothing to extend, and lab.runtime.sweeps.jobs.check_launcher's error line names the install.
Hydra does not scan modules named _*: the classes are registered through this import."""
import importlib.util

if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None:
    from hydra_plugins.lab_launchers._submitit import LauncherConfigs, LocalLauncher, SlurmLauncher  # noqa: F401
