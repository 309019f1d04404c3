/* A line-echo server on a Unix socket: the floor for any NDJSON server's round trip.
 *
 *   cc -O2 -o echo_server echo_server.c && ./echo_server /tmp/echo.sock
 *
 * bench/bench_echo.py builds and runs it beside storyd: each request line is written
 * back as it came, so a client's round trip costs only the kernel's socket path and
 * two context switches. poll(2) over every connection, one thread, no allocation.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_CONN 64
#define BUF 65536

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
        return 64;
    }
    signal(SIGPIPE, SIG_IGN);
    int listener = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strncpy(addr.sun_path, argv[1], sizeof addr.sun_path - 1);
    unlink(argv[1]);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 16)) {
        perror("bind/listen");
        return 1;
    }
    struct pollfd fds[MAX_CONN + 1];
    int n = 1;
    fds[0].fd = listener;
    fds[0].events = POLLIN;
    static char buf[BUF];
    for (;;) {
        if (poll(fds, n, -1) < 0 && errno != EINTR) {
            perror("poll");
            return 1;
        }
        if ((fds[0].revents & POLLIN) && n <= MAX_CONN) {
            int c = accept(listener, NULL, NULL);
            if (c >= 0) {
                fds[n].fd = c;
                fds[n].events = POLLIN;
                fds[n].revents = 0;
                n++;
            }
        }
        for (int i = 1; i < n; i++) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t got = read(fds[i].fd, buf, sizeof buf);
            if (got <= 0) {
                close(fds[i].fd);
                fds[i] = fds[--n];
                i--;
                continue;
            }
            for (ssize_t off = 0; off < got;) {
                ssize_t put = write(fds[i].fd, buf + off, (size_t)(got - off));
                if (put <= 0) break;
                off += put;
            }
        }
    }
}
