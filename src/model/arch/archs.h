// Loader functions of the architectures listed in archs.def.
#pragma once

#include <memory>

#include "h2okv/model/model.h"

namespace h2okv::model {

#define H2OKV_ARCH(name, loader) result<std::unique_ptr<model>> loader(const gguf::file& file);
#include "model/arch/archs.def"
#undef H2OKV_ARCH

}  // namespace h2okv::model
