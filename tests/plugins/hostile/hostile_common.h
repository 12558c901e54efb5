/* What the hostile test plugins share (tests/plugins/hostile_plugin.c and hostile_sandbox_plugin.c
 * here): the attack mode ATTN_HOSTILE_MODE names, and sleepers whose argv[0] is
 * ATTN_HOSTILE_MARKER (default attn_hostile_sleeper), so that a test finds any that survive with
 * pgrep -f. Included once per plugin, after <signal.h>, <stdlib.h>, <string.h>, <sys/wait.h> and
 * <unistd.h>, and after the correct example plugin (its entry point renamed correct_plugin_get). */
static const char* mode(void) {
  const char* m = getenv("ATTN_HOSTILE_MODE");
  return m != NULL ? m : "";
}

static int is_mode(const char* m) { return strcmp(mode(), m) == 0; }

/* A sleeper with the marker as its argv[0]: 10 minutes, far longer than any test. */
static void become_sleeper(void) {
  const char* marker = getenv("ATTN_HOSTILE_MARKER");
  char* const argv[] = {(char*)(marker != NULL ? marker : "attn_hostile_sleeper"), (char*)"600", NULL};
  execv("/bin/sleep", argv);
  for (;;) pause();
}

/* A sleeper from a grandchild in a session of its own (setsid; its parent exits at once), out of
 * the worker's process group. */
static void start_escaped_sleeper(void) {
  const pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() == 0) become_sleeper();
    _exit(0);
  }
  if (child > 0) waitpid(child, NULL, 0);
}

/* The plugin: the correct example's description under another name, calling `run`. */
static attnbench_plugin_v1 hostile_plugin;

static const attnbench_plugin_v1* hostile_plugin_get(uint32_t abi_version, const char* name, __typeof__(hostile_plugin.run) run) {
  const attnbench_plugin_v1* correct = correct_plugin_get(abi_version);
  if (correct == NULL) return NULL;
  hostile_plugin = *correct;
  hostile_plugin.name = name;
  hostile_plugin.run = run;
  return &hostile_plugin;
}
