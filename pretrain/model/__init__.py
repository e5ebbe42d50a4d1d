"""The MindFormers Mcore model: its config mapping (mindformers_config), the CPU replacements
(cpu_compat) and the builder. Importing this package does not import mindspore."""
