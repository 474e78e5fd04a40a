# The op's sources for a Make build (the list itself is sources.txt). Include it
# with FORGE_OBJ_DIR set to where the objects go; it defines FORGE_C_OBJS (the C
# core), FORGE_CXX_OBJS (options parser, TFLM kernel), FORGE_OBJS, FORGE_HDRS and
# the vpath that finds each source by its object's name.
FORGE_RECALIB_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
FORGE_SRCS := $(shell cat $(FORGE_RECALIB_DIR)/sources.txt)
FORGE_C_OBJS := $(patsubst %.c,$(FORGE_OBJ_DIR)/%.o,$(notdir $(filter %.c,$(FORGE_SRCS))))
FORGE_CXX_OBJS := $(patsubst %.cc,$(FORGE_OBJ_DIR)/%.o,$(notdir $(filter %.cc,$(FORGE_SRCS))))
FORGE_OBJS := $(FORGE_C_OBJS) $(FORGE_CXX_OBJS)
FORGE_HDRS := $(wildcard $(FORGE_RECALIB_DIR)/src/*.h $(FORGE_RECALIB_DIR)/micro/forge_recalib_kernel.h)
vpath %.c $(FORGE_RECALIB_DIR)/src
vpath %.cc $(FORGE_RECALIB_DIR)/src $(FORGE_RECALIB_DIR)/micro
