"""Which connections a stop breaks: every established TCP connection except those to kept ports."""
import os
import socket

from mindio_adaptor.core.communication import comm_abort
from mindio_adaptor.core.process import inherited_sockets
from mindio_adaptor.core.communication.comm_abort import Connection

INET = int(socket.AF_INET)


def test_kept_ports_on_either_side_and_listeners_survive():
    conns = [
        Connection(10, INET, 40001, 29500),  # client of the store
        Connection(11, INET, 29500, 40002),  # the store's side of a client (rank 0 hosting it)
        Connection(12, INET, 40003, 41000),  # gloo pair
        Connection(13, INET, 41000, 0),      # gloo listener
        Connection(14, INET, 40004, 45555),  # processor -> controller
        Connection(15, INET, 40005, 41001),  # gloo pair
    ]
    broken = comm_abort.connections_to_break(conns, keep_ports={29500, 45555})
    assert [c.fd for c in broken] == [12, 15]


def test_shutdown_wakes_a_blocked_reader_and_keeps_the_descriptor():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    mine = [c for c in comm_abort.tcp_connections() if c.fd == client.fileno()]
    assert len(mine) == 1
    assert comm_abort.shutdown_connections(mine) == 1
    assert client.recv(1) == b""  # end of stream at once, not a block
    os.fstat(client.fileno())  # still open: the owner closes it
    for s in (client, peer, server):
        s.close()


def test_a_listed_fd_reused_by_another_socket_is_left_alone():
    # the listed connection's fd was closed and its number taken by a Unix socket (a DataLoader's
    # fd passing), then by a TCP connection with other ports: neither may be shut down
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    left, right = socket.socketpair()
    other = socket.create_connection(server.getsockname())
    other_peer, _ = server.accept()
    listed = [c for c in comm_abort.tcp_connections() if c.fd == client.fileno()]
    fd = client.detach()  # the number stays ours; dup2 below puts other sockets behind it
    try:
        os.dup2(left.fileno(), fd)
        assert comm_abort.shutdown_connections(listed) == 0
        right.sendall(b"x")
        assert os.read(fd, 1) == b"x"  # still readable: not shut down
        os.dup2(other.fileno(), fd)
        assert comm_abort.shutdown_connections(listed) == 0
        other_peer.sendall(b"y")
        assert os.read(fd, 1) == b"y"
    finally:
        os.close(fd)
        for s in (left, right, other, other_peer, peer, server):
            s.close()


def test_a_forked_child_closes_the_inherited_connections():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what the at-fork hook does
        closed = inherited_sockets.close_in_child()
        os.write(write_end, str(closed).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert int(os.read(read_end, 16)) >= 3  # listener, client, accepted peer
    client.close()  # the parent's was the last reference: the peer sees the end at once
    assert peer.recv(1) == b""
    for s in (peer, server):
        s.close()
