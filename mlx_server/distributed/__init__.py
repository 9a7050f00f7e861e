"""One model across several machines (docs/DISTRIBUTED.md): the other machines as nodes
(nodes.py), and what this machine tells them about itself (node_info.py)."""
