# Generates OpCases.inc from the op table: per category, the `case OpKind::x:` labels of its ops.
# Switches over OpKind that handle one category on purpose close with
# RCJIT_OP_CASES(<the other categories>) instead of `default:` (tracer/OpCases.h), so a new op
# of the handled category is a -Wswitch error there. Per prop of the props column (OpProp,
# rcjit/ir/OpKind.h), RCJIT_OP_CASES_WITH_<prop> and RCJIT_OP_CASES_WITHOUT_<prop> are the labels
# of the ops that have it and of those that do not. Re-run by CMake whenever Ops.def changes.
set(_ops_def ${CMAKE_CURRENT_SOURCE_DIR}/include/rcjit/ir/Ops.def)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_ops_def})
file(STRINGS ${_ops_def} _rows REGEX "^RCJIT_OP\\(")
set(_props kFloatOnly kPostOp) # OpProp's flags, in its order
set(_categories "")
set(_count 0)
foreach(_row IN LISTS _rows)
  if(NOT _row MATCHES "^RCJIT_OP\\(([A-Za-z0-9_]+), *([A-Za-z0-9_]+), *-?[0-9]+, *[^,]+, *([^)]+)\\)")
    message(FATAL_ERROR
      "Ops.def: cannot read the row '${_row}' (want RCJIT_OP(name, Category, arity, attrs, props))")
  endif()
  set(_name ${CMAKE_MATCH_1})
  set(_cat ${CMAKE_MATCH_2})
  string(REGEX MATCHALL "[A-Za-z0-9_]+" _row_props "${CMAKE_MATCH_3}")
  list(REMOVE_ITEM _row_props 0)
  foreach(_p IN LISTS _row_props)
    if(NOT _p IN_LIST _props)
      message(FATAL_ERROR "Ops.def: the row of ${_name} has the prop ${_p}, which is not one of "
        "${_props} (a new OpProp flag goes into cmake/OpCases.cmake's list too)")
    endif()
  endforeach()
  list(APPEND _categories ${_cat})
  set(_label " \\\n  case ::rcjit::OpKind::${_name}:")
  string(APPEND _cases_${_cat} "${_label}")
  foreach(_p IN LISTS _props)
    if(_p IN_LIST _row_props)
      string(APPEND _with_${_p} "${_label}")
    else()
      string(APPEND _without_${_p} "${_label}")
    endif()
  endforeach()
  math(EXPR _count "${_count} + 1")
endforeach()
list(REMOVE_DUPLICATES _categories)
list(LENGTH _categories _ncat)

set(RCJIT_OP_CASES_DEFS "")
foreach(_cat IN LISTS _categories)
  string(APPEND RCJIT_OP_CASES_DEFS "#define RCJIT_OP_CASES_OF_${_cat}${_cases_${_cat}}\n")
endforeach()
foreach(_p IN LISTS _props)
  string(APPEND RCJIT_OP_CASES_DEFS "#define RCJIT_OP_CASES_WITH_${_p}${_with_${_p}}\n"
    "#define RCJIT_OP_CASES_WITHOUT_${_p}${_without_${_p}}\n")
endforeach()
# RCJIT_OP_CASES(A, B, ...): one to ${_ncat} categories, by argument count.
set(_pick "")
set(_chain "")
foreach(_n RANGE 1 ${_ncat})
  if(_n EQUAL 1)
    string(APPEND RCJIT_OP_CASES_DEFS "#define RCJIT_OP_CASES_N1(c) RCJIT_OP_CASES_OF_##c\n")
  else()
    math(EXPR _prev "${_n} - 1")
    string(APPEND RCJIT_OP_CASES_DEFS
      "#define RCJIT_OP_CASES_N${_n}(c, ...) RCJIT_OP_CASES_OF_##c RCJIT_OP_CASES_N${_prev}(__VA_ARGS__)\n")
  endif()
  string(APPEND _pick "_${_n}, ")
  string(PREPEND _chain "RCJIT_OP_CASES_N${_n}, ")
endforeach()
string(APPEND RCJIT_OP_CASES_DEFS
  "#define RCJIT_OP_CASES_PICK(${_pick}N, ...) N\n"
  "#define RCJIT_OP_CASES(...) RCJIT_OP_CASES_PICK(__VA_ARGS__, ${_chain}none)(__VA_ARGS__)\n"
  "#define RCJIT_OP_TABLE_ROWS ${_count}\n"
  "#define RCJIT_OP_TABLE_CATEGORIES ${_ncat}\n")
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/OpCases.inc.in
  ${PROJECT_BINARY_DIR}/generated/OpCases.inc @ONLY)
