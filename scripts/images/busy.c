/*
 * The scenario suite's workload container (image koord-e2e-busy): with no arguments it sleeps
 * until SIGTERM/SIGINT, like a pause container; with `--cpu N` it keeps N processes busy on the
 * CPU (an LS pod "burning" CPU, a BE pod doing batch work). Built statically by
 * scripts/build-images.sh so the image holds nothing else.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

static void spin(void) {
    volatile unsigned long x = 0;
    while (!stop) {
        x++;
    }
}

int main(int argc, char **argv) {
    long cpus = 0;
    if (argc == 3 && strcmp(argv[1], "--cpu") == 0) {
        char *end = NULL;
        cpus = strtol(argv[2], &end, 10);
        if (end == argv[2] || *end != '\0' || cpus < 1 || cpus > 1024) {
            fprintf(stderr, "busy: --cpu takes a whole number from 1 to 1024, not '%s'\n", argv[2]);
            return 2;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: busy [--cpu N]\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (cpus == 0) {
        while (!stop) {
            pause();
        }
        return 0;
    }
    for (long i = 1; i < cpus; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("busy: fork");
            return 1;
        }
        if (pid == 0) {
            spin();
            return 0;
        }
    }
    spin();
    /* Children got the same signal (one process group) or are killed with the container. */
    kill(0, SIGTERM);
    while (wait(NULL) > 0) {
    }
    return 0;
}
