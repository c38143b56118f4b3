"""One worker of the etcd HA test (ha_test.py): a publisher that keeps
publishing versions, or a reader that keeps fetching the latest one and checks
every byte, until the file --stop exists. Each operation is one JSON line on stdout: op, start and end
(wall-clock seconds), and ok / corrupt / the error's text."""

import argparse
import json
import os
import sys
import time

import numpy as np

import tensorhub


def pattern(version, size):
    return ((np.arange(size, dtype=np.uint32) * 7 + version * 131) % 251).astype(np.uint8)


def emit(**rec):
    # One write, newline included: the library logs to stderr, which shares
    # the file, and under PYTHONUNBUFFERED print() writes the line and its
    # newline apart, so a log line could land between them.
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def publisher(client, args):
    version, held = 0, None
    end = time.time() + args.seconds
    while time.time() < end and not os.path.exists(args.stop):
        version += 1
        t0 = time.time()
        try:
            replica = client.publish(args.model, version, {"w": pattern(version, args.bytes)})
            emit(op="publish", version=version, start=t0, end=time.time(), ok=True)
            if held is not None:
                held.release()  # spills if a reader still needs it
            held = replica
        except tensorhub.TensorHubError as e:
            emit(op="publish", version=version, start=t0, end=time.time(), ok=False, error=str(e))
        time.sleep(args.period)


def reader(client, args):
    dst = {"w": np.zeros(args.bytes, dtype=np.uint8)}
    end = time.time() + args.seconds
    last = 0  # the version fetched last
    while time.time() < end and not os.path.exists(args.stop):
        if args.newer and last:
            try:  # a rollout worker: only a newer version is worth a fetch
                client.wait_for_version(args.model, newer_than=last, timeout=1.0)
            except tensorhub.Timeout:
                continue
        t0 = time.time()
        try:
            version = client.fetch(args.model, into=dst, serve=args.serve)
            last = version
            good = np.array_equal(dst["w"], pattern(version, args.bytes))
            emit(op="fetch", version=version, start=t0, end=time.time(), ok=good, corrupt=not good)
        except tensorhub.VersionNotFound as e:  # nothing committed yet
            emit(op="wait", start=t0, end=time.time(), ok=True, error=str(e))
            time.sleep(0.1)
        except tensorhub.TensorHubError as e:
            emit(op="fetch", start=t0, end=time.time(), ok=False, error=str(e))
        time.sleep(args.period)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--role", choices=("publish", "read"), required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--model", default="m")
    p.add_argument("--bytes", type=int, default=16 << 20)
    p.add_argument("--stop", required=True, help="stop once this file exists")
    p.add_argument("--seconds", type=float, default=600, help="stop after this long in any case")
    p.add_argument("--period", type=float, default=0.2)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--serve", action="store_true", help="readers serve what they fetched to others")
    p.add_argument("--newer", action="store_true", help="readers fetch only versions newer than their last")
    args = p.parse_args()
    t0 = time.time()
    with tensorhub.Client(args.url, name=args.name, timeout=args.timeout) as client:
        emit(op="connect", start=t0, end=time.time(), ok=True)
        (publisher if args.role == "publish" else reader)(client, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
