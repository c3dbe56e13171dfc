#!/usr/bin/env python3
"""Plain TCP between two test hosts carrying data both ways at once: the traffic of a 2-rank
all-reduce (each rank sends and receives at the same time), and so its fair ceiling on a machine
whose links are the CPU (veth): one-way bandwidth alone overstates what a rank can move while it
also receives. Prints one JSON line: GB/s each way (bytes one way / time until both ways are done).

  in host 1: tcp_both_ways.py serve PORT BYTES
  in host 2: tcp_both_ways.py connect HOST PORT BYTES
"""
import json
import socket
import sys
import threading
import time

CHUNK = 4 << 20


def pump(sock, nbytes, send):
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    left = nbytes
    while left > 0:
        n = min(left, CHUNK)
        if send:
            sock.sendall(view[:n])
        else:
            got = sock.recv_into(view[:n])
            if got == 0:
                raise RuntimeError("peer closed early")
            n = got
        left -= n


def both_ways(sock, nbytes):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(120)
    # A one-byte handshake so both sides start together.
    sock.sendall(b"g")
    if sock.recv(1) != b"g":
        raise RuntimeError("bad handshake")
    start = time.perf_counter()
    sender = threading.Thread(target=pump, args=(sock, nbytes, True))
    sender.start()
    pump(sock, nbytes, False)
    sender.join()
    seconds = time.perf_counter() - start
    return {"bytes_each_way": nbytes, "seconds": seconds, "gbps_each_way": nbytes / seconds / 1e9}


def main():
    if sys.argv[1] == "serve":
        port, nbytes = int(sys.argv[2]), int(sys.argv[3])
        with socket.create_server(("0.0.0.0", port)) as server:
            server.settimeout(120)
            conn, _ = server.accept()
            with conn:
                print(json.dumps(both_ways(conn, nbytes)))
    else:
        host, port, nbytes = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        deadline = time.time() + 30
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=5)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        with sock:
            print(json.dumps(both_ways(sock, nbytes)))


if __name__ == "__main__":
    main()
