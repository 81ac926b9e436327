"""GeoClaw-like shallow water over topography: wet/dry, friction, topo files, fgmax."""
