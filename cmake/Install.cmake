# Installs the library, headers and a CMake package so find_package(tgraph) works.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS tgraph tgraph_static tgraph_cli EXPORT tgraphTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/tgraph DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT tgraphTargets NAMESPACE tgraph:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tgraph)
configure_package_config_file(cmake/tgraphConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/tgraphConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tgraph)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tgraphConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tgraphConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/tgraphConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tgraph)
