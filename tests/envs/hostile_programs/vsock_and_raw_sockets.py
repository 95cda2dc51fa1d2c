# Opens sockets of families a network namespace does not confine: AF_VSOCK (reaches the hypervisor
# host), AF_PACKET, AF_NETLINK, AF_ALG, AF_BLUETOOTH, AF_CAN, AF_TIPC, AF_XDP. Expected: "wrong
# answer"; none is created (the seccomp filter refuses every family but unix/inet/inet6).
import socket
import sys

for name, family, kind in [("AF_VSOCK", 40, socket.SOCK_STREAM), ("AF_PACKET", 17, socket.SOCK_DGRAM),
                           ("AF_NETLINK", 16, socket.SOCK_DGRAM), ("AF_ALG", 38, socket.SOCK_SEQPACKET),
                           ("AF_BLUETOOTH", 31, socket.SOCK_STREAM), ("AF_CAN", 29, socket.SOCK_RAW),
                           ("AF_TIPC", 30, socket.SOCK_RDM), ("AF_XDP", 44, socket.SOCK_RAW)]:
    try:
        s = socket.socket(family, kind)
        print(f"CREATED {name}")
        s.close()
    except OSError as e:
        sys.stderr.write(f"ATTEMPT {name}: errno {e.errno}\n")
