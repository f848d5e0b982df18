"""The zoo of user models (``models.py``) and the tiny tfrecord folder they train on."""
