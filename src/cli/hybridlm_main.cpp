// hybridlm entry point: parses the command line and runs one subcommand (see cli/commands.h).
#include "cli/commands.h"

int main(int argc, char** argv) { return hlm::cli_main(argc, argv); }
