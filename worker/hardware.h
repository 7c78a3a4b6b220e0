// What this node has, found without CUDA at link time: device files, sysfs, dlopen.
#pragma once

#include <string>

namespace mlrun {

/// NVIDIA GPU device files, /dev/nvidiaN, whatever CUDA_VISIBLE_DEVICES says.
int count_gpu_device_files();
/// NVIDIA GPUs visible to workers: /dev/nvidiaN, narrowed by CUDA_VISIBLE_DEVICES when set.
int count_gpus();
/// Online CPUs.
int count_cpus();
/// Whether libnccl.so.2 can be loaded here.
bool nccl_available();

/// torchrun's --nproc_per_node: a number, or auto (GPUs, else CPUs), gpu, cpu. Throws
/// std::runtime_error for gpu on a machine without GPUs.
int resolve_nproc_per_node(const std::string& spec);

}  // namespace mlrun
