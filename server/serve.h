/* serve.h -- `genloop serve`: the HTTP server process. */
#ifndef GL_SERVE_H
#define GL_SERVE_H

/* argv[0] is "serve". Returns the process exit code: 0 after a clean
 * shutdown (SIGINT/SIGTERM), 1 on bad flags or a model that fails to load. */
int serve_main(int argc, char **argv);

#endif
