#include <string>
#include <vector>

#include "launcher/run.h"

int main(int argc, char** argv) {
  return mlrun::mlrun_main(std::vector<std::string>(argv + 1, argv + argc));
}
