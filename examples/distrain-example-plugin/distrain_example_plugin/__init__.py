"""An example distrain plugin: a model for the tfrecord data set and a training mode."""
