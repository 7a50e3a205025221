// The hybridlm command line: one function per subcommand, registered in cli_main (cli.cpp).
// Exit codes: 0 success, 1 internal error, 2 bad input (file, flag or value).
#pragma once

namespace hlm {

int cli_main(int argc, char** argv);

}  // namespace hlm
