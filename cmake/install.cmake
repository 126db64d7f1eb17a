# cmake --install: the C API (include/h2okv.h, libh2okv.so, libh2okv_policy.so), its CMake package
# (find_package(h2okv CONFIG): h2okv::h2okv, h2okv::policy) and pkg-config files (h2okv, h2okv-policy), the
# CLI and the bundled model in share/h2okv/models/, where the installed CLI looks for it
# (tools/h2okv/resources.cpp). The C++ layers are not installed: their API is not stable.
include(CMakePackageConfigHelpers)

set(H2OKV_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/h2okv)
install(TARGETS h2okv_c h2okv_c_policy EXPORT h2okvTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/h2okv.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT h2okvTargets NAMESPACE h2okv:: DESTINATION ${H2OKV_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/h2okvConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/h2okvConfig.cmake INSTALL_DESTINATION ${H2OKV_CMAKE_DIR})
# While the major version is 0 a minor release may change the API: only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/h2okvConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/h2okvConfig.cmake ${PROJECT_BINARY_DIR}/h2okvConfigVersion.cmake
        DESTINATION ${H2OKV_CMAKE_DIR})

foreach(pc h2okv h2okv-policy)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

install(TARGETS h2okv RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/models/stories260K.gguf ${PROJECT_SOURCE_DIR}/models/LICENSE.stories260K
        DESTINATION ${CMAKE_INSTALL_DATADIR}/h2okv/models)
