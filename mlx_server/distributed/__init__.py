"""One model across several processes or machines: sharded serving on MLX's own distributed engine.

Every rank of a sharded model is a worker process (`rank.py`), rank 0 included, so no
collective ever runs in the server process (MLX's ring backend has no timeout). The server
treats the group as a model whose forward pass runs elsewhere (`remote_model.py`): it sends
rank 0 (cache offset, tokens) over a local socket with a deadline (`link.py`), rank 0 shares
the command with the other ranks (`lockstep.py`) and returns the logits. The other machines are
nodes (`nodes.py`), each reporting what it is and holds (`node_info.py`). See
docs/DISTRIBUTED.md and docs/ARCHITECTURE.md ("Sharded serving", "Cluster nodes").
"""
