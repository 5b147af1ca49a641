"""Python drivers that own epochs, validation, logging and stopping; kernels do the rows."""
