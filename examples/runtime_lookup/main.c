/* runtime_lookup_c KERNEL SHAPE [DTYPE [DEVICE]]: prints the config ktune answers, and where it came
   from. DEVICE: cpu (the default), cuda:N or a device fingerprint. */
#include <ktune/client.h>

#include <stdio.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s KERNEL SHAPE [DTYPE [DEVICE]]\n", argv[0]);
    return 2;
  }
  ktune_client* client = NULL;
  if (ktune_connect(NULL, &client) != KTUNE_OK) return 1;
  ktune_answer answer;
  const ktune_status status = ktune_lookup(client, argv[1], argv[2], argc > 3 ? argv[3] : NULL,
                                           argc > 4 ? argv[4] : NULL, &answer);
  if (status != KTUNE_OK) {
    fprintf(stderr, "lookup failed: %s: %s\n", ktune_status_string(status), ktune_last_error(client));
    ktune_close(client);
    return 1;
  }
  printf("rung=%s source=%s config=%s", ktune_rung_string(answer.rung),
         ktune_source_string(answer.source), answer.config_json);
  if (answer.reason[0] != '\0') printf(" reason=%s", answer.reason);
  printf("\n");
  for (size_t i = 0; i < answer.param_count; ++i) {
    printf("  %s = %lld\n", answer.params[i].name, (long long)answer.params[i].value);
  }
  ktune_close(client);
  return 0;
}
