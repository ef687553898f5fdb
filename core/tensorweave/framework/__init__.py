"""Graph-building foundations: Graph/Operation/Tensor, the OpDef registry, dtypes, shapes,
device specifications, the error hierarchy and the serialisable graph form."""
