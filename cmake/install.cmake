# `cmake --install build --prefix P` installs the tandem binary, the public
# headers and the static libraries behind them as a CMake package:
# find_package(Tandem) gives Tandem::tandem (include/tandem/tandem.hpp).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TANDEM_EXPORTED tandem_flags tandem_core tandem_obs tandem_run_files tandem_net tandem_cluster tandem_collective tandem_optim tandem_ps
    tandem_data tandem_models tandem_train tandem_api)
set_target_properties(tandem_api PROPERTIES EXPORT_NAME tandem)
install(TARGETS ${TANDEM_EXPORTED} EXPORT TandemTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tandem RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tandem DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT TandemTargets NAMESPACE Tandem:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TandemConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/TandemConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TandemConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TandemConfig.cmake ${PROJECT_BINARY_DIR}/TandemConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/TandemTorch.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
