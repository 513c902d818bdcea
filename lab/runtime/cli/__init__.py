"""The command line every entry point shares: one `error:` line and exit 2 for a user mistake (Hydra's own
parse and composition errors included), the config resolvers, `--help` from the configs' comments, the console
(each message once, long phases announced) and the config checks that run before anything heavy."""
