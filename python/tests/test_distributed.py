"""Data-parallel training from Python: connect() and the Communicator's collectives on NumPy
arrays, and `mpirun -np 2 python ...` training with Trainer(communicator=...) to the parameters
one process reaches with the whole batch."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import meganeura as mn

# The script each rank runs (and one process runs alone with --distributed none): an MLP trained
# for one epoch on a global batch of 32, each rank taking its share; rank 0 prints the weights.
SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import meganeura as mn

    world = mn.distributed.connect(sys.argv[1])
    ranks = world.size if world else 1
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 6)).astype(np.float32)
    y = np.argmax(x[:, :3], axis=1).astype(np.int32)
    net = mn.nn.Sequential(mn.nn.Linear(6, 8), mn.nn.ReLU(), mn.nn.Linear(8, 3)).seed(5)
    g = mn.Graph()
    loss = mn.cross_entropy(net(g.input("x", [32 // ranks, 6])), g.input("y", [32 // ranks], mn.i32))
    trainer = mn.Trainer(loss, optimizer=mn.optim.SGD(0.1, momentum=0.9), epochs=1, seed=3,
                         progress="none", communicator=world,
                         check_ranks=world is not None)
    trainer.fit(mn.data.TensorDataset({"x": x, "y": y}))
    if not world or world.rank == 0:
        names = trainer.session.parameter_names
        print(json.dumps({n: trainer.session.get(n).ravel().tolist() for n in names}))
""")


# A small CNN with BatchNorm, on every rank: each writes its running statistics to a file.
BATCH_NORM_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import meganeura as mn

    world = mn.distributed.connect("auto")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 1, 6, 6)).astype(np.float32) * (1 + np.arange(64) % 3)[:, None, None, None]
    y = (x.reshape(64, -1).mean(axis=1) > 0).astype(np.int32)
    net = mn.nn.Sequential(mn.nn.Conv2d(1, 4, 3), mn.nn.BatchNorm2d(4), mn.nn.ReLU(),
                           mn.nn.Flatten(), mn.nn.Linear(64, 2)).seed(1)
    g = mn.Graph()
    loss = mn.cross_entropy(net(g.input("x", [8, 1, 6, 6])), g.input("y", [8], mn.i32))
    net.eval()
    e = mn.Graph()
    e.output("loss", mn.cross_entropy(net(e.input("x", [8, 1, 6, 6])), e.input("y", [8], mn.i32)))
    trainer = mn.Trainer(loss, optimizer=mn.optim.SGD(0.05), epochs=1, progress="none",
                         communicator=world, check_ranks=True, eval_graph=e)
    trainer.fit(mn.data.TensorDataset({"x": x, "y": y}))
    s = trainer.session
    with open(f"{sys.argv[1]}/rank{world.rank}.json", "w") as f:
        json.dump({n: s.get(n).ravel().tolist() for n in s.state_names if "running" in n}, f)
""")


def mpirun(ranks):
    launcher = shutil.which("mpirun")
    if not launcher:
        pytest.fail("mpirun is missing: install Debian's openmpi-bin (scripts/setup.sh --tests)")
    env = {}
    if os.geteuid() == 0:
        env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return [launcher, "--oversubscribe", "-np", str(ranks)], env


def test_connect_alone_and_a_job_of_one():
    assert mn.distributed.connect("none") is None
    if not mn.distributed.launched_by_mpi() and not mn.distributed.launched_by_env():
        assert mn.distributed.connect("auto") is None
    with pytest.raises(mn.Error, match="unknown distributed engine 'bogus'"):
        mn.distributed.connect("bogus")
    world = mn.distributed.connect("mpi")  # without a launcher: a job of one
    assert (world.rank, world.size, world.engine) == (0, 1, "mpi")
    a = np.arange(5, dtype=np.float32)
    assert world.all_reduce_sum(a) is a
    np.testing.assert_array_equal(a, np.arange(5, dtype=np.float32))
    d = np.linspace(0, 1, 7)
    np.testing.assert_array_equal(world.all_reduce_sum(d), np.linspace(0, 1, 7))
    b = np.frombuffer(b"meganeura", dtype=np.uint8).copy()
    assert world.broadcast(b, 0).tobytes() == b"meganeura"
    with pytest.raises(mn.Error, match="expected float32 or float64"):
        world.all_reduce_sum(np.arange(3, dtype=np.int64))
    with pytest.raises(mn.Error, match="C-contiguous and writable"):
        world.all_reduce_sum(np.zeros((4, 4), dtype=np.float32)[:, 1])
    with pytest.raises(mn.DistributedError, match="broadcast from rank 1: the job has ranks 0 to 0"):
        world.broadcast(b, 1)


def test_a_bad_launch_environment_is_named():
    # In a process of its own: MPI, once initialised here by another test, marks the process as
    # launched by MPI, which takes precedence over the environment.
    env = dict(os.environ, WORLD_SIZE="2", RANK="0")
    env.pop("MASTER_ADDR", None)
    code = ("import meganeura as mn\n"
            "try:\n    mn.distributed.connect('nccl')\n"
            "except mn.Error as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "MASTER_ADDR is not set: a job of several ranks needs rank 0's host" in r.stdout


def test_two_ranks_train_what_one_process_trains(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    alone = subprocess.run([sys.executable, str(script), "none"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr
    launcher, extra = mpirun(2)
    env.update(extra)
    job = subprocess.run(launcher + [sys.executable, str(script), "auto"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stderr + job.stdout
    lines = [line for line in job.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, job.stdout  # rank 0 alone prints
    one, two = json.loads(alone.stdout.splitlines()[-1]), json.loads(lines[0])
    assert one.keys() == two.keys() and len(one) == 4
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_ranks_share_batch_norm_statistics(tmp_path):
    script = tmp_path / "bn.py"
    script.write_text(BATCH_NORM_SCRIPT)
    launcher, extra = mpirun(2)
    env = dict(os.environ, **extra)
    job = subprocess.run(launcher + [sys.executable, str(script), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stderr + job.stdout
    stats = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert stats[0].keys() == stats[1].keys() and len(stats[0]) == 2, stats[0].keys()
    for name in stats[0]:
        # Averaged after every update: the same on both ranks, and moved from their start.
        assert stats[0][name] == stats[1][name], name
        start = 0.0 if "mean" in name else 1.0
        assert any(abs(v - start) > 1e-3 for v in stats[0][name]), name
