from engine.llm.scripted import ScriptedModel, text, tool_call
from engine.session.outcomes import Final


async def test_a_tool_round_then_an_answer(engine, model: ScriptedModel):
    model.add(tool_call("write_file", '{"path": "a.txt", "content": "hi"}', "c1"), text("written"))
    handler = await engine.new_session("console")
    events = []
    result = await handler.handle_message("write hi to a.txt", emit=events.append)
    assert isinstance(result, Final), (result, events)
    assert result.content == "written"
    print(events)
    print(model.requests[1][0])
