"""The Gradio Space: data (records -> DataFrames), charts (DataFrames -> figures) and Blocks wiring,
each in its own module. It talks to the environment core only through its session facade."""
